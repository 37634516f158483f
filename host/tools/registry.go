package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/internal/uids"
)

// maxTaskIDBytes bounds a task id; see validTaskID.
const maxTaskIDBytes = 64

// maxPolicyTimeout mirrors the configuration's range for
// tools."NAME".timeout_seconds, re-checked here because a Registry may be
// built from a map that never went through config.Validate.
const maxPolicyTimeout = time.Hour

// Registry holds the built-in tools and their policies. It is safe for
// concurrent use; its policies are fixed at construction.
type Registry struct {
	tools    map[string]builtin
	policies map[string]Policy
	root     string // absolute, clean: <data dir>/workspaces

	// writeLocks serialise workspace.write calls of the same task, so that
	// two concurrent writes cannot both pass the workspace size check. A
	// fixed set of stripes keeps memory bounded however many tasks run.
	writeLocks [16]sync.Mutex

	// cgroups is where shell.run commands get their cgroups; nil: they run
	// as tracked sessions (see contain.go).
	cgroups *cgroups.Tree2
	// confine starts shell.run commands confined; nil only in tests that
	// measure or compare with the unconfined path.
	confine *shellConfinement
	// resources names how commands' memory, processes and CPU are bounded
	// (resources.go); v1 is the cgroup v1 tree when that is how, and
	// limits are the bounds. diskWhy says why commands write their
	// workspace directly, "" when they get an overlay (disk.go).
	resources string
	v1        *cgroups.Tree1
	limits    cgroups.Limits
	diskWhy   string
	// uids is Options.UIDs: each confined command's own uid.
	uids *uids.Pool
	log  hclog.Logger

	mu      sync.Mutex
	closed  bool
	running map[container]struct{} // shell.run commands started and not yet released
	done    sync.WaitGroup         // one per entry of running
}

// Options configure New.
type Options struct {
	// Tools are the [tools."NAME"] sections; a built-in tool missing from
	// it gets its default policy.
	Tools map[string]config.Tool
	// WorkspaceRoot is <data dir>/workspaces; absolute; created on first
	// use.
	WorkspaceRoot string
	// Trampoline is the executable shell.run commands start through,
	// confined (internal/confine): its main must call confine.Main first.
	// Default: the running binary.
	Trampoline string
	// RequireConfinement makes shell.run refuse to run where the kernel
	// offers no Landlock ([confinement] required), instead of running
	// commands with no_new_privs and no capabilities only.
	RequireConfinement bool
	// UIDs, when set, gives each shell.run command a uid of its own to run
	// under (a root daemon's pool; see ownership.go); nil: commands run as
	// the daemon's uid.
	UIDs *uids.Pool
	// Logger gets what no caller is there to hear (a workspace not handed
	// back after its command); nil: discarded.
	Logger hclog.Logger
}

// NewRegistry builds the registry from the [tools."NAME"] configuration.
// A built-in tool missing from cfg gets its default policy
// (config.Default); a name in cfg that is not a built-in tool, an unknown
// approval value or a timeout outside 1..3600 s is an error, so a policy
// never silently falls back to something weaker. workspaceRoot is
// <data dir>/workspaces and must be absolute; it is created on first use.
func NewRegistry(cfg map[string]config.Tool, workspaceRoot string) (*Registry, error) {
	return New(Options{Tools: cfg, WorkspaceRoot: workspaceRoot})
}

// New builds the registry (see NewRegistry). Close it to kill the commands
// still running.
func New(o Options) (*Registry, error) {
	cfg, workspaceRoot := o.Tools, o.WorkspaceRoot
	if !filepath.IsAbs(workspaceRoot) {
		return nil, fmt.Errorf("tools: workspace root %q must be an absolute path", workspaceRoot)
	}
	r := &Registry{
		tools:    make(map[string]builtin),
		policies: make(map[string]Policy),
		root:     filepath.Clean(workspaceRoot),
		running:  make(map[container]struct{}),
	}
	var err error
	r.uids, r.log = o.UIDs, o.Logger
	if r.log == nil {
		r.log = hclog.NewNullLogger()
	}
	if r.confine, err = newShellConfinement(o.Trampoline, o.RequireConfinement, shellPolicy(cfg)); err != nil {
		return nil, err
	}
	r.setupResources(shellPolicy(cfg))
	for _, b := range builtins() {
		r.tools[b.spec.Name] = b
	}
	for _, name := range slices.Sorted(maps.Keys(cfg)) {
		if _, ok := r.tools[name]; !ok {
			return nil, fmt.Errorf("tools: configuration names unknown tool %q; the built-in tools are %v",
				name, slices.Sorted(maps.Keys(r.tools)))
		}
	}
	defaults := config.Default().Tools
	for _, name := range slices.Sorted(maps.Keys(r.tools)) {
		ct, ok := cfg[name]
		if !ok {
			if ct, ok = defaults[name]; !ok {
				// A built-in without a configured default is a bug
				// between this package and config; fail closed.
				return nil, fmt.Errorf("tools: tool %q has no default policy in host/config", name)
			}
		}
		var needsApproval bool
		switch ct.Approval {
		case config.ApprovalNever:
		case config.ApprovalAlways:
			needsApproval = true
		default:
			return nil, fmt.Errorf("tools: tool %q: approval %q must be %q or %q",
				name, ct.Approval, config.ApprovalNever, config.ApprovalAlways)
		}
		timeout := time.Duration(ct.TimeoutSeconds) * time.Second
		if timeout <= 0 || timeout > maxPolicyTimeout {
			return nil, fmt.Errorf("tools: tool %q: timeout_seconds %d must be in 1..%d",
				name, ct.TimeoutSeconds, int(maxPolicyTimeout/time.Second))
		}
		r.policies[name] = Policy{Enabled: ct.Enabled, NeedsApproval: needsApproval, Timeout: timeout}
	}
	return r, nil
}

// Containment names how shell.run keeps a command's processes together:
// "cgroup" or "session" (the fallback; see docs/security.md).
func (r *Registry) Containment() string {
	if r.cgroups != nil {
		return "cgroup"
	}
	return "session"
}

// Close kills every shell.run command still running, waits (boundedly) for
// their cleanup and refuses any later Call with ErrClosed. The host calls
// it when it stops, after its runs have ended.
func (r *Registry) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.running {
		c.kill()
	}
	r.mu.Unlock()
	finished := make(chan struct{})
	go func() { r.done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(cgroups.EmptyWait + time.Second):
		return errors.New("tools: close: shell.run commands still being cleaned up")
	}
	if r.cgroups != nil {
		r.cgroups.RemoveParent()
	}
	if r.v1 != nil {
		r.v1.RemoveParents()
	}
	return nil
}

// newContainer returns a fresh container for one command.
func (r *Registry) newContainer() (container, error) {
	if r.cgroups == nil {
		return &sessionContainer{}, nil
	}
	var lim *cgroups.Limits
	if r.resources == cgroups.ModeCgroup2 {
		lim = &r.limits
	}
	cg, err := r.cgroups.New("cmd-", lim)
	if err != nil {
		return nil, err
	}
	return cgroupContainer{cg}, nil
}

// track records a started command so Close can kill it; false if the
// registry is closed (the caller kills it at once).
func (r *Registry) track(c container) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[c] = struct{}{}
	r.done.Add(1)
	return !r.closed
}

func (r *Registry) untrack(c container) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, c)
	r.done.Done()
}

func (r *Registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Specs returns the enabled tools, sorted by name: what a model is offered.
func (r *Registry) Specs() []Spec {
	var specs []Spec
	for _, name := range slices.Sorted(maps.Keys(r.tools)) {
		if r.policies[name].Enabled {
			specs = append(specs, r.tools[name].spec)
		}
	}
	return specs
}

// Policy returns the policy of a tool, enabled or not; false if there is no
// such tool.
func (r *Registry) Policy(name string) (Policy, bool) {
	p, ok := r.policies[name]
	return p, ok
}

// Workspace returns the absolute workspace directory of a task,
// <workspace root>/<task id>, without creating it. The task id must match
// [a-z0-9_]{1,64}, which also keeps it a single, harmless path segment.
func (r *Registry) Workspace(taskID string) (string, error) {
	if !validTaskID(taskID) {
		return "", fmt.Errorf("%w: task id %q must match [a-z0-9_]{1,%d}", ErrInvalidEnv, text.Clip(taskID, 80), maxTaskIDBytes)
	}
	return filepath.Join(r.root, taskID), nil
}

func validTaskID(id string) bool {
	if len(id) == 0 || len(id) > maxTaskIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Call runs a tool for a task. The caller has already obtained any approval
// the tool's policy requires. Arguments are validated before anything runs;
// the tool then runs under its policy timeout, and under ctx: when ctx ends,
// the tool is stopped (every process of a shell command is killed) and Call
// returns ctx's error promptly. A tool is never started once ctx has ended.
func (r *Registry) Call(ctx context.Context, env Env, name string, args json.RawMessage) (Result, error) {
	if r.isClosed() {
		return Result{}, ErrClosed
	}
	b, ok := r.tools[name]
	if !ok {
		return Result{}, fmt.Errorf("%w: %q", ErrUnknownTool, text.Clip(name, 64))
	}
	pol := r.policies[name]
	if !pol.Enabled {
		return Result{}, fmt.Errorf("%w: %s", ErrDisabled, name)
	}
	ws, err := r.Workspace(env.TaskID)
	if err != nil {
		return Result{}, err
	}
	if env.Workspace != "" && filepath.Clean(env.Workspace) != ws {
		return Result{}, fmt.Errorf("%w: workspace %q is not the workspace of task %s", ErrInvalidEnv, text.Clip(env.Workspace, 200), env.TaskID)
	}
	if len(args) > b.maxArgs {
		return Result{}, &ArgError{Tool: name, Message: fmt.Sprintf("are %d bytes; the limit is %d", len(args), b.maxArgs)}
	}
	fields, err := parseArgs(name, args, b.fields)
	if err != nil {
		return Result{}, err
	}
	if env.IdempotencyKey != "" {
		switch {
		case !b.honoursKey:
			return Result{}, &ArgError{Tool: name, Field: "idempotency_key", Message: "this tool does not honour an idempotency key (workspace.write does): call it without one"}
		case len(env.IdempotencyKey) > MaxIdempotencyKeyBytes:
			return Result{}, &ArgError{Tool: name, Field: "idempotency_key", Message: fmt.Sprintf("is %d bytes; the limit is %d", len(env.IdempotencyKey), MaxIdempotencyKeyBytes)}
		}
	}
	c := &call{r: r, tool: name, taskID: env.TaskID, ws: ws, fields: fields, timeout: pol.Timeout, key: env.IdempotencyKey}
	act, err := b.bind(c)
	if err != nil {
		return Result{}, err
	}

	// Refuse to start after cancellation: an approved tool must not run
	// once its task was cancelled (DESIGN.md §6).
	if ctx.Err() != nil {
		return Result{}, ctxError(ctx, name)
	}
	// start is taken before the deadline is set, so start+timeout is never
	// after the deadline; time.sleep relies on that.
	c.start = time.Now()
	tctx, cancel := context.WithTimeoutCause(ctx, pol.Timeout, &timeoutError{after: pol.Timeout})
	defer cancel()
	res, err := act(tctx)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctxError(ctx, name)
		}
		if _, ok := errors.AsType[*ArgError](err); ok {
			return Result{}, err
		}
		return Result{}, fmt.Errorf("tools: %s: %w", name, err)
	}
	return res, nil
}

// ctxError reports the end of the caller's context. It always wraps
// ctx.Err(), so errors.Is(err, context.Canceled) holds even when the caller
// cancelled with a custom cause, which is wrapped too.
func ctxError(ctx context.Context, tool string) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause != nil && !errors.Is(cause, err) {
		return fmt.Errorf("tools: %s: %w (%w)", tool, err, cause)
	}
	return fmt.Errorf("tools: %s: %w", tool, err)
}

// openWorkspace opens the task's workspace as an os.Root, creating it (0700)
// on first use. Every workspace file operation goes through the returned
// Root, which resolves each path component itself and refuses any that
// leaves the directory, symlinks included, without a window between check
// and use.
func (r *Registry) openWorkspace(taskID string) (*os.Root, error) {
	if err := os.MkdirAll(r.root, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace root: %w", err)
	}
	parent, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, fmt.Errorf("open workspace root: %w", err)
	}
	defer parent.Close()
	if err := parent.Mkdir(taskID, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	if err := r.CheckWorkspace(taskID); err != nil {
		return nil, err
	}
	// Opening through the parent Root refuses a task directory that was
	// replaced by a symlink leading elsewhere.
	root, err := parent.OpenRoot(taskID)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return root, nil
}

func (r *Registry) writeLock(taskID string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(taskID))
	return &r.writeLocks[h.Sum32()%uint32(len(r.writeLocks))]
}

// call is one Call in progress: the parsed arguments and what the tool may
// use.
type call struct {
	r       *Registry
	tool    string
	taskID  string
	ws      string // absolute workspace directory
	fields  map[string]json.RawMessage
	timeout time.Duration // the tool's policy timeout
	start   time.Time     // set just before the timeout starts
	key     string        // the idempotency key, for a tool that honours one
}

// HonoursKey reports whether tool name de-duplicates calls by their
// idempotency key (Env.IdempotencyKey).
func (r *Registry) HonoursKey(name string) bool {
	b, ok := r.tools[name]
	return ok && b.honoursKey
}

// action is a tool's work, with its arguments already validated.
type action func(ctx context.Context) (Result, error)

// parseArgs checks that args is one JSON object whose keys are all
// accepted, and returns its members. Empty arguments and null mean {}.
func parseArgs(tool string, args json.RawMessage, accepted []string) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return map[string]json.RawMessage{}, nil
	}
	if trimmed[0] != '{' {
		return nil, &ArgError{Tool: tool, Message: "must be a JSON object"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil {
		// The decoder's message can quote a character of the input; say
		// only where the problem is.
		msg := "are not a valid JSON object"
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			msg += fmt.Sprintf(" (syntax error at byte %d)", se.Offset)
		}
		return nil, &ArgError{Tool: tool, Message: msg}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(accepted, k) {
			return nil, &ArgError{Tool: tool, Field: text.Clip(k, 64),
				Message: "unknown argument; accepted: " + strings.Join(accepted, ", ")}
		}
	}
	return m, nil
}

// raw returns a member of the arguments; a JSON null counts as absent.
func (c *call) raw(field string) (json.RawMessage, bool) {
	v, ok := c.fields[field]
	if !ok || string(bytes.TrimSpace(v)) == "null" {
		return nil, false
	}
	return v, true
}

func (c *call) argErr(field, format string, a ...any) error {
	return &ArgError{Tool: c.tool, Field: field, Message: fmt.Sprintf(format, a...)}
}

// decode decodes an optional argument into v and reports whether it was
// present; typ names the expected JSON type for the error.
func (c *call) decode(field, typ string, v any) (bool, error) {
	raw, ok := c.raw(field)
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, c.argErr(field, "must be %s", typ)
	}
	return true, nil
}

func (c *call) required(field string, present bool, err error) error {
	if err == nil && !present {
		return c.argErr(field, "is required")
	}
	return err
}
