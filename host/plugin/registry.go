package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/taskhost/taskhost/internal/confine"
)

// Registry is the Launcher of plugin executors: it knows how to start each
// configured kind and remembers what each said about itself at registration.
type Registry struct {
	opts    PluginOptions
	forker  *forker
	support confine.Support

	mu     sync.Mutex
	specs  map[string]PluginSpec
	descs  map[string]Description
	errs   map[string]error
	stamps map[string]binStamp // the binary each verdict is about
	// gens counts each kind's verdicts: a pooled process started under
	// an older one is never handed out (pool.go).
	gens map[string]uint64
	pool *procPool
	// checkMu serialises the probes of Check and Reload.
	checkMu sync.Mutex
}

var _ Launcher = (*Registry)(nil)

// NewRegistry prepares the plugin socket dir: it is created 0700 and swept of
// sockets a killed plugin left behind.
func NewRegistry(opts PluginOptions) (*Registry, error) {
	opts = opts.withDefaults()
	if opts.SocketDir == "" {
		return nil, fmt.Errorf("plugin socket dir is required")
	}
	// Linux caps a socket path at 108 bytes; go-plugin adds a temp dir and
	// a file name of about 40 bytes.
	if len(opts.SocketDir) > 60 {
		return nil, fmt.Errorf("plugin socket dir %s is %d bytes long: unix socket paths are capped at 108 bytes, use a data dir with a shorter path", opts.SocketDir, len(opts.SocketDir))
	}
	if err := os.MkdirAll(opts.SocketDir, 0o700); err != nil {
		return nil, fmt.Errorf("plugin socket dir: %w", err)
	}
	if err := sweepDir(opts.SocketDir); err != nil {
		return nil, err
	}
	if opts.Trampoline == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("plugin trampoline: %w", err)
		}
		opts.Trampoline = exe
	}
	findCgroups(&opts)
	support := confine.Probe()
	if support.LandlockABI < 1 {
		opts.Logger.Warn("the kernel offers no Landlock: plugins run without filesystem confinement", "require_confinement", opts.RequireConfinement)
	}
	r := &Registry{
		opts: opts, forker: newForker(), support: support,
		specs: map[string]PluginSpec{}, descs: map[string]Description{}, errs: map[string]error{}, stamps: map[string]binStamp{},
		gens: map[string]uint64{},
	}
	r.pool = newProcPool(r)
	return r, nil
}

func sweepDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("sweep plugin socket dir: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("sweep plugin socket dir: %w", err)
		}
	}
	return nil
}

// Register starts spec's plugin once, asks it to Describe itself and stops
// it. A kind that fails any check stays registered as unavailable: Describe
// and Launch then return an *UnavailableError saying which check failed.
func (r *Registry) Register(ctx context.Context, spec PluginSpec) error {
	st, serr := specStamp(spec)
	desc, err := r.probe(ctx, spec)
	defer r.pool.refresh() // after the unlock
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs[spec.Kind] = spec
	r.setVerdict(spec.Kind, st, serr == nil, desc, err)
	return err
}

// MarkUnavailable registers kind as unavailable for reason, e.g. because the
// configuration disables it. Selecting it is then refused (fail closed).
func (r *Registry) MarkUnavailable(kind, check, detail string) {
	defer r.pool.refresh() // after the unlock
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gens[kind]++
	delete(r.descs, kind)
	r.errs[kind] = &UnavailableError{Kind: kind, Check: check, Detail: detail}
}

func (r *Registry) probe(ctx context.Context, spec PluginSpec) (Description, error) {
	ec, err := launch(ctx, r.forker, spec, r.opts, r.support, NewServicesServer(NoServices{}))
	if err != nil {
		return Description{}, err
	}
	defer ec.Stop()
	d, err := DescribeChecked(ctx, spec.Kind, ec)
	if err == nil && ec.seed != nil {
		// A probe serves no task: what it built is fit to seed the
		// launches that will.
		if err := ec.seed.keep(); err != nil {
			r.opts.Logger.Warn("plugin cache not kept", "kind", spec.Kind, "error", err)
		}
	}
	return d, err
}

// DescribeChecked calls Describe and checks the answer fits the kind.
func DescribeChecked(ctx context.Context, kind string, e Executor) (Description, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := e.Describe(ctx)
	if err != nil {
		return Description{}, &UnavailableError{Kind: kind, Check: "describe", Detail: err.Error()}
	}
	switch {
	case d.Kind != kind:
		return Description{}, &UnavailableError{Kind: kind, Check: "describe", Detail: fmt.Sprintf("plugin describes itself as %q", d.Kind)}
	case d.ProtocolVersion != protocolVersion:
		return Description{}, &UnavailableError{Kind: kind, Check: "protocol", Detail: fmt.Sprintf("plugin speaks protocol %d, host speaks %d", d.ProtocolVersion, protocolVersion)}
	case len(d.CheckpointSchemas) == 0:
		return Description{}, &UnavailableError{Kind: kind, Check: "describe", Detail: "plugin accepts no checkpoint schema"}
	}
	// An executor with a runtime of its own reports its preflight; anything
	// but "ok" keeps it unavailable (fail closed).
	if p, ok := d.Runtime["preflight"]; ok && p != "ok" {
		return Description{}, &UnavailableError{Kind: kind, Check: "preflight", Detail: p}
	}
	return d, nil
}

// Probe starts one process of kind that serves no task, checks its
// description and lets it seed the kind's cache (Confinement.SeedCache),
// as registering it did.
func (r *Registry) Probe(ctx context.Context, kind string) error {
	r.mu.Lock()
	spec, ok := r.specs[kind]
	r.mu.Unlock()
	if !ok {
		return &UnavailableError{Kind: kind, Check: "registered", Detail: fmt.Sprintf("no executor %q is configured", kind)}
	}
	_, err := r.probe(ctx, spec)
	return err
}

// Describe returns kind's registered description.
func (r *Registry) Describe(kind string) (Description, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err, ok := r.errs[kind]; ok {
		return Description{}, err
	}
	d, ok := r.descs[kind]
	if !ok {
		return Description{}, &UnavailableError{Kind: kind, Check: "registered", Detail: fmt.Sprintf("no executor %q is configured (known: %s)", kind, strings.Join(r.kindsLocked(), ", "))}
	}
	return d, nil
}

// Kinds lists every registered kind, available or not, sorted.
func (r *Registry) Kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kindsLocked()
}

func (r *Registry) kindsLocked() []string {
	var ks []string
	for k := range r.specs {
		ks = append(ks, k)
	}
	for k := range r.errs {
		if _, ok := r.specs[k]; !ok {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

// Launch starts a new process of kind serving services, or hands out one
// of kind's pre-started processes (pool.go), which serves this one task.
func (r *Registry) Launch(ctx context.Context, kind string, services Services) (Executor, error) {
	if _, err := r.Describe(kind); err != nil {
		return nil, err
	}
	if ec := r.pool.take(ctx, kind, services); ec != nil {
		return ec, nil
	}
	r.mu.Lock()
	spec := r.specs[kind]
	r.mu.Unlock()
	ec, err := launch(ctx, r.forker, spec, r.opts, r.support, NewServicesServer(services))
	if err != nil {
		return nil, err
	}
	if spec.Prestart > 0 {
		// Its uid, once back, may be one the pool waits for.
		ec.afterStop = func() { r.pool.fill(kind) }
	}
	return ec, nil
}

// Confinement says how kind's plugins are confined on this kernel, e.g.
// "landlock abi 7, no_new_privs, no capabilities, seccomp, rlimits, own
// uid (2000000000-2000065535), cgroup1 (memory 2048 MiB, 4096 processes,
// 100% CPU)" or "none (no Landlock)".
func (r *Registry) Confinement(kind string) string {
	r.mu.Lock()
	spec, ok := r.specs[kind]
	r.mu.Unlock()
	if !ok {
		spec.Confine = DefaultConfinement()
	}
	s := pluginPolicy(spec.Confine, r.opts.RequireConfinement, "/", "/").Summary(r.support)
	if strings.HasPrefix(s, "none") {
		return s
	}
	if spec.Confine.OwnUID && spec.Confine.User == "" && r.opts.UIDs != nil {
		s += ", own uid (" + r.opts.UIDs.Range().String() + ")"
	}
	s += cgroupSummary(r.opts.Cgroups, spec.Confine)
	return s
}

// OwnUIDs says whether the registry has a pool of uids to run plugins
// under (a root daemon's).
func (r *Registry) OwnUIDs() bool { return r.opts.UIDs != nil }

// Close stops the forker. Call it only after every launched executor has
// been stopped: its thread's exit delivers the parent-death signal.
func (r *Registry) Close() {
	// Pooled processes first: they serve no one, and their clean-up is
	// waited for below.
	r.pool.close()
	// The data dir must be left as it is once the host is closed: wait
	// for the stopped plugins' socket dirs to go, but not for a
	// grandchild that keeps a plugin's stderr open forever.
	done := make(chan struct{})
	go func() {
		r.forker.cleanups.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(pluginCleanupWait):
		r.opts.Logger.Warn("plugin clean-up still running at close; its socket dir may outlive the host", "waited", pluginCleanupWait)
	}
	r.forker.close()
	// Every plugin was stopped, and its cgroups with it: this removes the
	// daemon's own parents, if no other user of them is left.
	r.opts.Cgroups.Close()
}

// pluginCleanupWait bounds how long Close waits for stopped plugins'
// clean-up.
const pluginCleanupWait = 5 * time.Second
