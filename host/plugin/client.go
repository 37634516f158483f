package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"

	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/steprpc"
	"github.com/taskhost/taskhost/internal/uids"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// PluginSpec says how to start one executor kind.
type PluginSpec struct {
	Kind   string
	Path   string   // absolute path of the plugin binary
	Args   []string // extra command-line arguments
	SHA256 string   // lowercase hex; empty means not pinned
	// Interpreter, when set, runs Path as a script: the host execs this
	// binary (pinned by InterpreterSHA256, when set) with the script's
	// sealed copy as its first argument (interpreted.go); SHA256 then pins
	// the script.
	Interpreter       string
	InterpreterSHA256 string
	// Confine is what its processes may do beyond the common confinement.
	Confine Confinement
	// Prestart is how many of its processes are kept started ahead of
	// need, 0..MaxPrestart (pool.go); 0: none.
	Prestart int
}

// PluginOptions bound how plugins are started and stopped.
type PluginOptions struct {
	SocketDir    string        // under the data dir; swept at start
	StartTimeout time.Duration // default 10 s
	StopGrace    time.Duration // default 2 s
	MaxMessage   int           // gRPC message bytes, both directions; default 4 MiB
	StderrLines  int           // lines of stderr kept for crash records; default 20
	Logger       hclog.Logger

	// Trampoline is the executable every plugin is started through: its
	// main calls confine.Main first. Default: the running binary.
	Trampoline string
	// RequireConfinement refuses to start plugins where the kernel lacks
	// Landlock (fail closed) instead of starting them less confined.
	RequireConfinement bool
	// UIDs hands out the uids of plugins whose Confinement.OwnUID is set;
	// nil (a daemon that is not root): they run as the daemon's uid.
	UIDs *uids.Pool
	// Cgroups is how each plugin process gets cgroups of its own
	// (cgroup.go); nil: NewRegistry finds them (cgroups.Find), sweeping
	// what a dead daemon left.
	Cgroups *cgroups.Set
	// UIDReserve is how many of UIDs a pooled (pre-started) process
	// leaves free for the processes of running tasks and their shell.run
	// commands: the pool starts none while no more are free.
	UIDReserve int

	// pooled marks the options of a pooled start (pool.go), the one kind
	// of start UIDReserve holds back.
	pooled bool
}

func (o PluginOptions) withDefaults() PluginOptions {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 2 * time.Second
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = 4 << 20
	}
	if o.StderrLines <= 0 {
		o.StderrLines = 20
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// envAllowList is every variable of the host's environment a plugin may see.
// Anything else (API keys above all) never reaches a plugin.
var envAllowList = []string{"PATH", "LANG", "LC_ALL", "TZ"}

// pluginEnv is the plugin's environment: the allow-list, its private dir
// as its home and temp dir (nothing else is writable to it), and
// GOMAXPROCS as the CPUs its cgroup lets it use (gomaxprocs).
func pluginEnv(privateDir string, cpuPercent int) []string {
	var env []string
	for _, k := range envAllowList {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, "HOME="+privateDir, "TMPDIR="+privateDir, "GOMAXPROCS="+strconv.Itoa(gomaxprocs(cpuPercent)))
}

// gomaxprocs is how many CPUs a plugin bounded to cpuPercent % of one CPU
// may use at once, rounded up: a Go plugin's runtime told so does not keep
// idle threads spinning for work on CPUs it cannot use. Go's own reading
// of the cgroup never goes below 2, and a plugin serves one task: with 16
// Go plugins stepping at once on 2 cores, GOMAXPROCS=2 spent about half of
// their CPU in the scheduler (waking and parking threads), and 1 made the
// host's steps/s 1.76× (docs/operations.md, "Concurrency"). An executor
// that needs parallel CPU gets it by a larger cpu_percent.
func gomaxprocs(cpuPercent int) int {
	return max(1, (cpuPercent+99)/100)
}

// UnavailableError says why an executor cannot be used. Check names the
// failed check: "binary", "checksum", "handshake", "start_timeout",
// "describe", "protocol", "disabled".
type UnavailableError struct {
	Kind   string
	Check  string
	Detail string
}

func (e *UnavailableError) Error() string {
	check := e.Check
	if check == "checksum" {
		check = "pin mismatch" // as taskhost executors names it
	}
	return fmt.Sprintf("executor %q unavailable (%s): %s", e.Kind, check, e.Detail)
}

// ErrExecutorUnavailable matches every *UnavailableError.
var ErrExecutorUnavailable = errors.New("executor unavailable")

func (e *UnavailableError) Is(target error) bool { return target == ErrExecutorUnavailable }

// openBinary opens spec's binary once and checks it is an executable
// regular file and, when pinned, has the pinned SHA-256 — hashed from the
// returned file, which is what the trampoline execs (never the path again,
// which could have been swapped since). A fresh hash is computed on every
// call. The caller closes the file.
func openBinary(spec PluginSpec) (*os.File, error) {
	f, err := os.Open(spec.Path) // O_RDONLY|O_CLOEXEC
	if err != nil {
		return nil, &UnavailableError{Kind: spec.Kind, Check: "binary", Detail: fmt.Sprintf("plugin binary %s: %v (build it with 'make build' or fix [executors.%s] path)", spec.Path, errors.Unwrap(err), spec.Kind)}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &UnavailableError{Kind: spec.Kind, Check: "binary", Detail: err.Error()}
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		f.Close()
		return nil, &UnavailableError{Kind: spec.Kind, Check: "binary", Detail: fmt.Sprintf("plugin binary %s is not an executable file (mode %s)", spec.Path, fi.Mode())}
	}
	if spec.SHA256 == "" {
		return f, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, &UnavailableError{Kind: spec.Kind, Check: "checksum", Detail: err.Error()}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != spec.SHA256 {
		f.Close()
		return nil, &UnavailableError{Kind: spec.Kind, Check: "checksum", Detail: fmt.Sprintf("plugin binary %s has SHA-256 %s, config pins %s", spec.Path, got, spec.SHA256)}
	}
	return f, nil
}

// openExecutable opens what spec's process execs: its binary, or for an
// interpreted executor its interpreter and its script's sealed copy
// (script is nil for a binary).
func openExecutable(spec PluginSpec) (bin, script *os.File, err error) {
	if spec.Interpreter != "" {
		return openInterpreted(spec)
	}
	bin, err = openBinary(spec)
	return bin, nil, err
}

// hashbangScript returns the fd to exec for spec's binary bin: bin, or nil
// for an unpinned #! script. A script cannot be exec'd from its fd (its
// interpreter reopens it by path), so an unpinned one runs by path, with
// its own directory readable and executable for what it runs (added to
// spec); a pinned one is refused: it needs [executors.NAME] interpreter.
func hashbangScript(spec *PluginSpec, bin *os.File) (*os.File, error) {
	script, err := isScript(bin)
	if err != nil {
		return nil, &UnavailableError{Kind: spec.Kind, Check: "binary", Detail: err.Error()}
	}
	if !script {
		return bin, nil
	}
	if spec.SHA256 != "" {
		return nil, &UnavailableError{Kind: spec.Kind, Check: "binary", Detail: fmt.Sprintf("plugin binary %s is a script: a pinned script needs [executors.%s] interpreter (and interpreter_sha256), so that the host runs the copy it hashed; its #! line would have the script read again by path, after the pin was checked", spec.Path, spec.Kind)}
	}
	if real, err := filepath.EvalSymlinks(spec.Path); err == nil {
		spec.Confine.ReadOnly = append(slices.Clip(spec.Confine.ReadOnly), filepath.Dir(real))
	}
	return nil, nil
}

// isScript says whether f starts with "#!".
func isScript(f *os.File) (bool, error) {
	var magic [2]byte
	n, err := f.ReadAt(magic[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return n == 2 && magic == [2]byte{'#', '!'}, nil
}

// protocolVersion is the executor protocol the host speaks; a plugin that
// describes another is unavailable.
const protocolVersion = pb.ProtocolVersion

// grpcExecutorPlugin is the host half of go-plugin's GRPCPlugin: it hands the
// connection to an executorClient. go-plugin's broker is not used: host
// services are calls on each step's own stream.
type grpcExecutorPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (grpcExecutorPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error {
	return errors.New("the host does not serve executors")
}

func (grpcExecutorPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &executorClient{rpc: pb.NewExecutorClient(conn)}, nil
}

// executorClient is an Executor backed by one plugin process.
type executorClient struct {
	rpc      pb.ExecutorClient
	services pb.HostServicesServer // answers the service calls of every step
	limits   steprpc.Limits

	client     *goplugin.Client
	proc       *process
	grace      time.Duration
	privateDir string             // removed at Stop (for a plugin user: its whole run base)
	releaseUID func(emptied bool) // gives an OwnUID plugin's uid back at Stop; nil: none
	seed       *seedCache         // its copy of the kind's seed cache; nil: none
	log        *pluginLog
	cleanups   *sync.WaitGroup // the forker's: Registry.Close waits for go-plugin's clean-up
	afterStop  func()          // once its uid is back (pool.go refills); nil: nothing

	stopOnce sync.Once
}

func launch(ctx context.Context, f *forker, spec PluginSpec, opts PluginOptions, support confine.Support, services pb.HostServicesServer) (*executorClient, error) {
	bin, script, err := openExecutable(spec)
	if err != nil {
		return nil, err
	}
	// The child holds its own copies once started; a failed start needs none.
	defer bin.Close()
	if script != nil {
		defer script.Close()
	}
	if opts.RequireConfinement && support.LandlockABI < 1 {
		return nil, &UnavailableError{Kind: spec.Kind, Check: "confinement", Detail: (&ConfinementError{Kind: spec.Kind, Support: support}).Error()}
	}
	l := &launching{f: f, opts: opts, script: script, execFD: bin}
	if script == nil {
		// A binary, or a script run by its #! line.
		if l.execFD, err = hashbangScript(&spec, bin); err != nil {
			return nil, err
		}
	}
	if err := spec.Confine.resolveUser(); err != nil {
		return nil, &UnavailableError{Kind: spec.Kind, Check: "user", Detail: err.Error()}
	}
	releaseUID, err := takeUID(&spec, opts)
	if err != nil {
		return nil, err
	}
	launched := false
	defer func() {
		if !launched {
			releaseUID(false)
		}
	}()
	if err := l.runDirs(&spec); err != nil {
		return nil, err
	}
	l.spec = spec
	l.log = newPluginLog(opts.Logger.Named(spec.Kind), spec.Kind, launchLabelsFrom(ctx))
	ec, err := l.start()
	if err != nil {
		return nil, err
	}
	ec.releaseUID, ec.seed, launched = releaseUID, l.seed, true
	ec.cleanups = &f.cleanups
	ec.services, ec.limits = services, steprpc.Limits{MaxMessage: opts.MaxMessage}
	return ec, nil
}

// launching is one plugin process on its way to a handshake: what launch
// prepared for it, and the process once go-plugin's runner made it.
type launching struct {
	f      *forker
	spec   PluginSpec
	opts   PluginOptions
	execFD *os.File // what the trampoline execs
	script *os.File // an interpreted executor's sealed script; nil: none
	log    *pluginLog

	base, privateDir, cleanup string
	seed                      *seedCache
	proc                      *process
}

// takeUID gives an OwnUID plugin a uid of the pool, set in spec, and
// returns how to give it back; a no-op for any other plugin.
func takeUID(spec *PluginSpec, opts PluginOptions) (release func(emptied bool), err error) {
	if !spec.Confine.OwnUID || spec.Confine.User != "" || opts.UIDs == nil {
		return func(bool) {}, nil
	}
	if err := spec.Confine.checkReachable(); err != nil {
		return nil, &UnavailableError{Kind: spec.Kind, Check: "confinement", Detail: err.Error()}
	}
	// A pooled start leaves UIDReserve uids for the tasks' own starts.
	reserve := 0
	if opts.pooled {
		reserve = opts.UIDReserve
	}
	uid, err := opts.UIDs.AcquireLeaving(reserve)
	if errors.Is(err, uids.ErrReserved) {
		return nil, errPoolNoUID
	}
	if err != nil {
		return nil, &UnavailableError{Kind: spec.Kind, Check: "user", Detail: err.Error()}
	}
	spec.Confine.UID, spec.Confine.GID = uid, uid
	kind, log := spec.Kind, opts.Logger
	return func(emptied bool) {
		// Every process of the uid is killed first: a grandchild that
		// outlived the plugin goes too. Cgroups the plugin was born in,
		// removed empty, already prove there is none.
		release := opts.UIDs.Release
		if emptied {
			release = opts.UIDs.ReleaseEmpty
		}
		if err := release(uid); err != nil {
			log.Error("plugin uid not returned to the pool", "kind", kind, "uid", uid, "error", err)
		}
	}, nil
}

// runDirs makes the plugin's run dir (a bounded tmpfs where it can be),
// its private dir beneath, and its copy of the seed cache, whose flag it
// adds to spec's arguments.
func (l *launching) runDirs(spec *PluginSpec) error {
	base, cleanup, bounded, err := runBase(l.opts.SocketDir, spec.Confine)
	if err != nil {
		return err
	}
	if !bounded && cleanup != "" {
		l.f.unboundedWarn.Do(func() {
			l.opts.Logger.Warn("plugin run dirs not bounded: no tmpfs could be mounted on one (does the daemon lack CAP_SYS_ADMIN?); what a plugin writes beneath it is bounded by the filesystem only", "kind", spec.Kind, "dir", base)
		})
	}
	l.base = base
	privateDir, err := newPrivateDir(base, spec.Confine)
	if err != nil {
		removeRunDir(cleanup)
		return err
	}
	if cleanup == "" {
		cleanup = privateDir
	}
	l.privateDir, l.cleanup = privateDir, cleanup
	if spec.Confine.SeedCache != "" && spec.Confine.UID > 0 {
		if l.seed, err = newSeedCache(spec.Confine.SeedCache, filepath.Join(privateDir, "seed-cache"), spec.Confine.UID, spec.Confine.GID); err != nil {
			removeRunDir(cleanup)
			return &UnavailableError{Kind: spec.Kind, Check: "cache", Detail: err.Error()}
		}
		spec.Args = append(slices.Clip(spec.Args), spec.Confine.SeedCacheFlag, l.seed.copy)
	}
	return nil
}

// start starts the plugin through go-plugin and takes it through its
// handshake to the executor's client.
func (l *launching) start() (*executorClient, error) {
	spec, opts := l.spec, l.opts
	// What the plugin writes to os.Stdout or os.Stderr once it serves
	// comes through go-plugin's relay, not the process's own pipes.
	relayOut, relayErr := &streamWriter{}, &streamWriter{}
	callOpts := grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MaxMessage), grpc.MaxCallSendMsgSize(opts.MaxMessage))
	// Fixed flow-control windows of the message limit, as the SDK's
	// server has: grpc's dynamic ones send a ping for about every message
	// of a step (measured: a step's round trip 10% faster without).
	windows := []grpc.DialOption{grpc.WithInitialWindowSize(int32(opts.MaxMessage)), grpc.WithInitialConnWindowSize(int32(opts.MaxMessage))}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  pb.ProtocolVersion,
			MagicCookieKey:   pb.MagicCookieKey,
			MagicCookieValue: pb.MagicCookieValue,
		},
		VersionedPlugins: map[int]goplugin.PluginSet{pb.ProtocolVersion: {pb.PluginName: grpcExecutorPlugin{}}},
		RunnerFunc: func(_ hclog.Logger, cmd *exec.Cmd, socketDir string) (runner.Runner, error) {
			p, err := l.process(cmd, socketDir)
			if err != nil {
				return nil, err
			}
			relayOut.t, relayErr.t = p.stderr, p.stderr
			return p, nil
		},
		SkipHostEnv: true,
		// Host services are calls on each step's stream, which the host
		// opens on the plugin's own listener: the plugin never connects
		// anywhere (seccomp refuses connect(2)), and no broker or yamux
		// session sits on the data path.
		GRPCBrokerMultiplex: false,
		AllowedProtocols:    []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:        opts.StartTimeout,
		UnixSocketConfig:    &goplugin.UnixSocketConfig{TempDir: l.base},
		GRPCDialOptions:     append([]grpc.DialOption{callOpts}, windows...),
		Logger:              teardownQuiet{opts.Logger.Named(spec.Kind)},
		Stderr:              io.Discard,
		SyncStdout:          relayOut,
		SyncStderr:          relayErr,
	})
	if _, err := client.Start(); err != nil {
		check := "handshake"
		if strings.Contains(err.Error(), "timeout while waiting for plugin to start") {
			check = "start_timeout"
		} else if perr := protocolMismatch(err); perr != nil {
			check, err = "protocol", perr
		}
		return l.unavailable(client, check, err)
	}
	rpcClient, err := client.Client()
	if err != nil {
		return l.unavailable(client, "handshake", err)
	}
	raw, err := rpcClient.Dispense(pb.PluginName)
	if err != nil {
		return l.unavailable(client, "handshake", err)
	}
	ec := raw.(*executorClient)
	ec.client, ec.proc, ec.grace, ec.privateDir, ec.log = client, l.proc, opts.StopGrace, l.cleanup, l.log
	return ec, nil
}

// process is go-plugin's runner: the confined command of the plugin, in
// its cgroups, with only the allowed environment.
func (l *launching) process(cmd *exec.Cmd, socketDir string) (*process, error) {
	spec, opts := l.spec, l.opts
	if spec.Confine.UID > 0 {
		if err := os.Chown(socketDir, spec.Confine.UID, spec.Confine.GID); err != nil {
			return nil, err
		}
	}
	pol := pluginPolicy(spec.Confine, opts.RequireConfinement, l.privateDir, socketDir)
	box, err := pluginCgroups(opts.Cgroups, spec.Confine, &pol)
	if err != nil {
		return nil, err
	}
	target, args := spec.Path, spec.Args
	if l.script != nil {
		target, args = spec.Interpreter, append([]string{scriptArg}, spec.Args...)
	}
	ccmd, err := confine.Command(opts.Trampoline, pol, l.execFD, target, args...)
	if err != nil {
		releaseCgroups(box, opts.Logger)
		return nil, err
	}
	if l.script != nil {
		// First, so that it is fd scriptFD in the trampoline and the
		// interpreter; Command's own files follow.
		ccmd.ExtraFiles = append([]*os.File{l.script}, ccmd.ExtraFiles...)
	}
	// cmd carries only go-plugin's handshake variables: SkipHostEnv keeps
	// the host's environment out, the allow-list adds back the harmless
	// part.
	ccmd.Env = append(pluginEnv(l.privateDir, spec.Confine.cgroupLimits().CPUPercent), cmd.Env...)
	p, err := newProcess(l.f, spec.Path, ccmd, opts.StderrLines, l.log)
	if err != nil {
		releaseCgroups(box, opts.Logger)
		return nil, err
	}
	p.contain(box, spec.Confine.cgroupLimits(), opts.Logger)
	p.socketDir = socketDir
	l.proc = p
	return p, nil
}

// unavailable ends a plugin that did not get through its start, and says
// why, with its last stderr lines when it said something.
func (l *launching) unavailable(client *goplugin.Client, check string, err error) (*executorClient, error) {
	client.Kill()
	detail := err.Error()
	if l.proc != nil {
		l.proc.stop(0)
		// A plugin that died before its handshake (a confinement it cannot
		// live with, say) said why on stderr.
		l.proc.stderr.settle(250 * time.Millisecond)
		if tail := l.proc.stderr.tail(); tail != "" {
			detail += "; last stderr lines:\n" + tail
		}
	}
	removeRunDir(l.cleanup)
	return nil, &UnavailableError{Kind: l.spec.Kind, Check: check, Detail: detail}
}

func (c *executorClient) Describe(ctx context.Context) (Description, error) {
	r, err := c.rpc.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return Description{}, err
	}
	return Description{
		Kind: r.GetKind(), Version: r.GetVersion(), ProtocolVersion: int(r.GetProtocolVersion()),
		CheckpointSchemas: r.GetCheckpointSchemas(), Capabilities: r.GetCapabilities(), Runtime: r.GetRuntime(),
	}, nil
}

func (c *executorClient) Step(ctx context.Context, req StepRequest) (StepResult, error) {
	preq := &pb.StepRequest{
		TaskId: req.TaskID, RunId: uint64(req.RunID), Attempt: uint32(req.Attempt),
		TurnToken: req.TurnToken, Spec: req.Spec,
		Remaining:    toPBBudgets(req.Remaining),
		Limits:       toPBBudgets(req.Limits),
		SummaryChars: uint32(max(req.SummaryChars, 0)),

		ModelPromptTokens: uint32(min(max(req.ModelPromptTokens, 0), math.MaxUint32)),
	}
	for _, s := range req.Recent {
		preq.Recent = append(preq.Recent, &pb.StepSummary{Step: uint32(s.Step), Summary: s.Text})
	}
	for _, ch := range req.Children {
		preq.Children = append(preq.Children, &pb.ChildTask{TaskId: ch.TaskID, Status: ch.Status, Reason: ch.Reason, Result: ch.Result})
	}
	for _, e := range req.Indeterminate {
		preq.Indeterminate = append(preq.Indeterminate, &pb.Effect{
			Attempt: uint32(e.Attempt), Seq: uint32(e.Seq), Kind: e.Kind, Fingerprint: e.Fingerprint,
			IdempotencyKey: e.IdempotencyKey, Status: e.Status, Summary: e.Summary,
		})
	}
	c.log.attempt.Store(uint32(req.Attempt))
	if req.Checkpoint != nil {
		preq.Checkpoint = &pb.Checkpoint{Schema: req.Checkpoint.Schema, Payload: req.Checkpoint.Payload}
	}
	r, err := c.runStep(ctx, preq)
	if err != nil {
		return StepResult{}, err
	}
	switch o := r.GetOutcome().(type) {
	case *pb.StepResponse_Continue:
		return StepResult{Outcome: OutcomeContinue, Summary: o.Continue.GetSummary(), Checkpoint: fromPBCheckpoint(o.Continue.GetCheckpoint())}, nil
	case *pb.StepResponse_Complete:
		return StepResult{Outcome: OutcomeComplete, Summary: o.Complete.GetSummary(), Result: o.Complete.GetResult(), Checkpoint: fromPBCheckpoint(o.Complete.GetCheckpoint())}, nil
	case *pb.StepResponse_Fail:
		return StepResult{Outcome: OutcomeFail, Reason: o.Fail.GetReason(), Message: o.Fail.GetMessage()}, nil
	default:
		return StepResult{}, errors.New("executor returned a step response with no outcome")
	}
}

func toPBBudgets(b Budgets) *pb.Budgets {
	return &pb.Budgets{Steps: b.Steps, ToolCalls: b.ToolCalls, ModelCalls: b.ModelCalls, Depth: b.Depth, WallSeconds: b.WallSeconds,
		ModelTokens: b.ModelTokens, OutputBytes: b.OutputBytes}
}

func fromPBCheckpoint(c *pb.Checkpoint) *Checkpoint {
	if c == nil {
		return nil
	}
	return &Checkpoint{Schema: c.GetSchema(), Payload: c.GetPayload()}
}

func (c *executorClient) Exited() <-chan struct{} { return c.proc.exited }

func (c *executorClient) ExitStatus() ExitStatus {
	<-c.proc.exited
	return c.proc.status
}

// stderrSettle bounds how long a crash verdict waits for the dead plugin's
// last stderr lines when something else keeps writing to the pipe.
const stderrSettle = 50 * time.Millisecond

func (c *executorClient) StderrTail() string {
	select {
	case <-c.proc.exited:
		// The verdict waits on this: only for the lines already in the
		// pipe, never for a grandchild still holding it.
		c.proc.stderr.settle(stderrSettle)
	default:
	}
	return c.proc.stderr.tail()
}

func (c *executorClient) Stop() {
	c.stopOnce.Do(func() {
		c.proc.stop(c.grace)
		if c.releaseUID != nil {
			c.releaseUID(c.proc.cgroupsEmptied())
		}
		if c.afterStop != nil {
			c.afterStop()
		}
		c.proc.stderr.flushDropped()
		// Whatever the plugin left in its private dir goes with it.
		removeRunDir(c.privateDir)
		// go-plugin's own clean-up (socket dir, goroutines) waits for every
		// holder of the plugin's stderr; it must not hold up the host, but
		// a closing registry waits for it (bounded).
		c.cleanups.Add(1)
		go func() {
			defer c.cleanups.Done()
			c.client.Kill()
		}()
	})
}
