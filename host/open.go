package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/uids"
	"github.com/taskhost/taskhost/store"
)

// Data dir layout.
const (
	StoreFile     = "taskhost.db"
	KeyFile       = "host.key"
	LockFile      = "taskhost.lock"
	SocketDirName = "plugins"
	// WorkspaceDirName holds one workspace per task.
	WorkspaceDirName = "workspaces"
	// CacheDirName holds what executors keep across their starts, one dir
	// per kind (machinespirit's compiled saved state); anything in it may
	// be deleted while no daemon runs.
	CacheDirName = "cache"

	// ExecutorPrefix names executor binaries found beside the taskhost
	// binary: taskhost-executor-KIND.
	ExecutorPrefix = "taskhost-executor-"
)

// Options configure Open.
type Options struct {
	DataDir string
	Config  config.Config
	Logger  hclog.Logger
	// Synchronous is the store's SQLite synchronous mode: "FULL" (the
	// default: a committed step survives power loss) or "NORMAL".
	Synchronous string
	// ExecutorDir is searched for taskhost-executor-* binaries; default: the
	// directory of the running binary.
	ExecutorDir string
	// Trampoline starts every plugin confined (internal/confine); its main
	// must call confine.Main first. Default: a trusted taskhost-confine in
	// the executor dir (findTrampoline), else the running binary.
	Trampoline string
	// Observer is told what the metrics count as it happens; nil: no one.
	Observer Observer
	// Version is this binary's version, shown in the store's hosts row.
	Version string
	// StoreFault is the store's Options.WriteFault: for fault-injection
	// tests, nil otherwise.
	StoreFault func(committed bool) error
	// Solo is a foreground host (taskhost run): it starts the tasks it is
	// asked to at once and never the queue's (Settings.Solo).
	Solo bool
}

// Host is an open data dir: its store, its executors and its Runner. Only
// one Host may have a data dir open at a time.
type Host struct {
	Runner   *Runner
	Registry *plugin.Registry
	Store    *store.Store
	DataDir  string
	Recovery store.Recovery
	// Model holds the model provider's preflight result.
	Model *ModelChecker

	stopPreflight context.CancelFunc
	preflightDone chan struct{}

	lock        *os.File
	executorDir string          // Options.ExecutorDir, for ReloadExecutors
	trampoline  *trampoline     // the dedicated taskhost-confine found and opened, if any
	tools       *tools.Registry // closed at stop: its shell.run commands die with the host
	closeOnce   sync.Once
	closeErr    error
}

// ErrDataDirLocked is returned when another taskhost holds the data dir.
var ErrDataDirLocked = errors.New("data dir in use")

// Open opens (creating if needed) the data dir, recovers what a previous
// host left running, and registers every executor. A store that fails its
// checks is an error: the host refuses to run tasks on it.
func Open(ctx context.Context, opts Options) (*Host, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	cfg := opts.Config
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, err
	}
	if err := ensureOpenFiles(cfg.Tasks.MaxConcurrent); err != nil {
		return nil, err
	}
	// Before the first write — the lock file — so that a data dir refused
	// here is left exactly as it was.
	if err := checkDataDir(dir); err != nil {
		return nil, err
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	// No child — plugin or tool — may read the daemon's /proc environ
	// (its API keys) or memory.
	if err := markNonDumpable(); err != nil {
		return nil, err
	}
	h := &Host{DataDir: dir, lock: lock, executorDir: opts.ExecutorDir}
	fail := func(err error) (*Host, error) {
		h.close()
		return nil, err
	}
	key, hostID, err := hostIdentity(dir, cfg)
	if err != nil {
		return fail(err)
	}
	obs := opts.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	if h.Store, err = openStore(ctx, dir, cfg, storeOptions(cfg, opts, obs, hostID)); err != nil {
		return fail(err)
	}
	pool, err := h.openRegistry(cfg, &opts, log)
	if err != nil {
		return fail(err)
	}
	svc, err := h.openServices(cfg, opts.Trampoline, pool, log)
	if err != nil {
		return fail(err)
	}
	set := settingsFrom(cfg)
	set.Solo = opts.Solo
	set.Observer = obs
	h.Runner = NewRunner(h.Store, h.Registry, key, set, svc, filepath.Join(dir, WorkspaceDirName), log.Named("runner"))
	if h.Recovery, err = h.Runner.Recover(ctx); err != nil {
		return fail(fmt.Errorf("start-up recovery: %w", err))
	}
	if err := h.Runner.StartFleet(ctx, opts.Version); err != nil {
		return fail(fmt.Errorf("fleet registration: %w", err))
	}
	if err := h.registerExecutors(ctx, cfg, opts, pool != nil, log); err != nil {
		return fail(err)
	}
	h.startModelCheck(ctx, cfg, svc.Model, log)
	return h, nil
}

// hostIdentity loads the data dir's key, or makes it, and names this host
// in the store. The key comes first: unless [fleet] host_id names this
// host, its id is derived from the key.
func hostIdentity(dir string, cfg config.Config) (key []byte, hostID string, err error) {
	if key, err = loadOrCreateKey(filepath.Join(dir, KeyFile)); err != nil {
		return nil, "", err
	}
	hostID = cfg.Fleet.HostID
	switch {
	case hostID == "" && cfg.Store.Driver == config.StorePostgres:
		// The hosts of a fleet share one key (a checkpoint sealed on one
		// must verify on another): the machine and the data dir tell
		// them apart.
		machine, _ := os.Hostname()
		hostID = HostIDFromKey(key, machine, dir)
	case hostID == "":
		hostID = HostIDFromKey(key)
	}
	return key, hostID, nil
}

// storeOptions are the store's options from the config: its limits in
// bytes, the observer's hooks, this host's id.
func storeOptions(cfg config.Config, opts Options, obs Observer, hostID string) store.Options {
	return store.Options{Synchronous: opts.Synchronous, ObserveCommit: obs.StoreCommitted,
		ObserveRetry: obs.StoreRetried, ObserveFenced: obs.StoreFenced, HostID: hostID, WriteFault: opts.StoreFault, Limits: store.Limits{
			Summary:       cfg.Limits.SummaryChars * 4, // characters of up to 4 UTF-8 bytes
			Checkpoint:    cfg.Tasks.CheckpointMaxBytes + 4096,
			Result:        cfg.Limits.ResultBytes,
			EventPayload:  cfg.Limits.EventBytes,
			EventsPerTask: cfg.Limits.EventsPerTask,
		}}
}

// openRegistry finds the plugin trampoline (setting opts.Trampoline when
// the caller named none), opens the uid pool, sweeps a dead daemon's run
// dirs and opens the plugin registry. The pool is nil where plugins take
// no uids of their own.
func (h *Host) openRegistry(cfg config.Config, opts *Options, log hclog.Logger) (*uids.Pool, error) {
	if opts.Trampoline == "" {
		var err error
		if h.trampoline, err = findTrampoline(executorDirOf(opts.ExecutorDir)); err != nil {
			log.Warn("plugins start through the taskhost binary instead, about 10 ms slower each", "error", err)
		}
		if h.trampoline != nil {
			log.Info("plugin trampoline", "path", h.trampoline.path, "sha256", h.trampoline.sha256)
			opts.Trampoline = h.trampoline.execPath()
		}
	}
	pool, err := uidPool(cfg.Confinement, log)
	if err != nil {
		return nil, err
	}
	// The data dir is locked: what a dead daemon left of its plugins' run
	// dirs (their tmpfs) is nobody's now.
	if n := plugin.SweepRunDirs(filepath.Join(h.DataDir, SocketDirName)); n > 0 {
		log.Info("plugin run dirs a previous daemon left removed", "count", n)
	}
	h.Registry, err = plugin.NewRegistry(plugin.PluginOptions{
		UIDs:         pool,
		SocketDir:    filepath.Join(h.DataDir, SocketDirName),
		StartTimeout: time.Duration(cfg.Limits.PluginStartSeconds) * time.Second,
		StopGrace:    time.Duration(cfg.Limits.PluginStopGraceSeconds) * time.Second,
		MaxMessage:   cfg.Limits.GRPCMessageBytes,
		Logger:       log.Named("plugin"),
		Trampoline:   opts.Trampoline,
		// Each running task holds a uid for its plugin and one for its
		// shell.run command: pre-started plugins never take those.
		UIDReserve: 2 * cfg.Tasks.MaxConcurrent,

		RequireConfinement: cfg.Confinement.Required,
	})
	return pool, err
}

// openServices opens what the host serves executors besides their steps:
// the model provider and the tools, which it checks the workspaces for.
func (h *Host) openServices(cfg config.Config, trampoline string, pool *uids.Pool, log hclog.Logger) (ServiceConfig, error) {
	svc := ServiceConfig{ApprovalTimeout: time.Duration(cfg.Approvals.TimeoutSeconds) * time.Second}
	var err error
	if svc.Model, err = model.New(cfg.Model, os.Getenv); err != nil {
		return svc, fmt.Errorf("model provider: %w", err)
	}
	root := filepath.Join(h.DataDir, WorkspaceDirName)
	if svc.Tools, err = tools.New(tools.Options{Tools: cfg.Tools, WorkspaceRoot: root,
		Trampoline: trampoline, RequireConfinement: cfg.Confinement.Required, UIDs: pool, Logger: log.Named("tools")}); err != nil {
		return svc, fmt.Errorf("tools: %w", err)
	}
	h.tools = svc.Tools
	for _, err := range untrustedWorkspaces(root, svc.Tools.CheckWorkspace) {
		log.Warn("a task's workspace is untrusted: that task's tools refuse it and it cannot be resumed until it is fixed", "error", err)
	}
	if svc.Tools.Landlocked() {
		log.Info("shell.run confinement", "confinement", svc.Tools.Confinement())
	} else {
		log.Warn("the kernel offers no Landlock: shell.run commands are not confined to their workspace", "confinement", svc.Tools.Confinement())
	}
	return svc, nil
}

// registerExecutors registers every executor kind the config and the
// executor dir name; one that fails its checks is logged and left
// unavailable, not fatal.
func (h *Host) registerExecutors(ctx context.Context, cfg config.Config, opts Options, ownUIDs bool, log hclog.Logger) error {
	specs, err := executorSpecs(opts.ExecutorDir, filepath.Join(h.DataDir, CacheDirName), h.trampolinePath(), ownUIDs, cfg)
	if err != nil {
		return err
	}
	if opts.Solo {
		// A foreground host runs its one task: nothing to start ahead.
		for i := range specs {
			specs[i].Prestart = 0
		}
	}
	for _, s := range specs {
		if err := h.Registry.Register(ctx, s); err != nil {
			log.Warn("executor unavailable", "kind", s.Kind, "error", err)
		}
	}
	if !cfg.MachineSpirit.Enabled {
		h.Registry.MarkUnavailable("machinespirit", "disabled", machineSpiritDisabled)
	}
	return nil
}

// startModelCheck sets up the model endpoint's check and, with
// [model] preflight, runs it once in the background: a slow endpoint must
// not hold up the start.
func (h *Host) startModelCheck(ctx context.Context, cfg config.Config, m model.Provider, log hclog.Logger) {
	provider := cfg.Model.Provider
	if provider == "" {
		provider = config.ProviderScripted
	}
	// A backstop above the provider's own per-request timeout, which names
	// itself in the result ("no response within ...").
	timeout := time.Duration(cfg.Model.TimeoutSeconds)*time.Second + 5*time.Second
	if cfg.Model.TimeoutSeconds <= 0 {
		timeout = time.Minute + 5*time.Second
	}
	h.Model = newModelChecker(m, ModelStatus{Provider: provider, Name: cfg.Model.Name, Preflight: cfg.Model.Preflight}, timeout, log.Named("model"))
	if !cfg.Model.Preflight {
		return
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.stopPreflight = cancel
	h.preflightDone = make(chan struct{})
	go func() {
		defer close(h.preflightDone)
		h.Model.Check(pctx)
	}()
}

// Close stops every run (DESIGN §6 graceful stop) and closes the data dir.
// Closing a closed Host returns the first Close's error.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.closeErr = errors.Join(h.Runner.Shutdown(ctx), h.close())
	})
	return h.closeErr
}

func (h *Host) close() error {
	if h.stopPreflight != nil {
		h.stopPreflight()
		<-h.preflightDone
	}
	var err error
	if h.tools != nil {
		// The runs have ended, and with them their tool calls; this kills
		// whatever a command left behind all the same.
		err = h.tools.Close()
	}
	if h.Registry != nil {
		h.Registry.Close()
	}
	h.trampoline.close() //nolint:errcheck // a read-only file: nothing to lose
	if h.Store != nil {
		h.Store.Close()
	}
	if h.lock != nil {
		// Unlocked first: a child forked by another goroutine holds a copy
		// of this descriptor until it execs, and the flock belongs to the
		// open file both copies share, so a close alone would leave the dir
		// locked against the next Open of this process.
		syscall.Flock(int(h.lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // the close below releases it otherwise
		h.lock.Close()
	}
	return err
}

// lockDataDir takes an exclusive lock on the data dir for this process.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: lock: %w", dir, err)
	}
	// checkDataDir saw the path; this is the file actually opened.
	fi, err := f.Stat()
	if err == nil {
		err = checkEntry(path, fi, kindFile, os.Geteuid())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("%w: data dir %s is used by another taskhost (pid %s); stop it or use another --data-dir", ErrDataDirLocked, dir, strings.TrimSpace(string(pid)))
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// executorSpecs lists the executors to register: every
// taskhost-executor-KIND binary in dir, then [executors.KIND] from the
// config, which overrides a discovered one of the same kind. cacheDir is
// where machinespirit keeps its saved state; trampoline, when set, is the
// host's dedicated trampoline, which machinespirit then starts its worker
// through as well. pooled says plugins run under uids of the daemon's pool.
func executorSpecs(dir, cacheDir, trampoline string, pooled bool, cfg config.Config) ([]plugin.PluginSpec, error) {
	dir = executorDirOf(dir)
	if dir == "" {
		return nil, errors.New("locate executors: the running binary's path is unknown")
	}
	found := map[string]plugin.PluginSpec{}
	entries, _ := os.ReadDir(dir) // a missing dir just has no executors
	for _, e := range entries {
		kind, ok := strings.CutPrefix(e.Name(), ExecutorPrefix)
		if ok && kind != "" && !e.IsDir() {
			found[kind] = plugin.PluginSpec{Kind: kind, Path: filepath.Join(dir, e.Name())}
		}
	}
	for kind := range found {
		s := found[kind]
		s.Confine = confinementFrom(cfg.Confinement, config.Executor{})
		s.Prestart = cfg.Tasks.Prestart
		found[kind] = s
	}
	for kind, ex := range cfg.Executors {
		found[kind] = plugin.PluginSpec{Kind: kind, Path: ex.Path, Args: ex.Args, SHA256: ex.SHA256,
			Interpreter: ex.Interpreter, InterpreterSHA256: ex.InterpreterSHA256, Confine: confinementFrom(cfg.Confinement, ex),
			Prestart: *cmp.Or(ex.Prestart, &cfg.Tasks.Prestart)}
	}
	if ms, ok := found[config.ExecutorMachineSpirit]; ok {
		ms.Prestart = *cmp.Or(cfg.MachineSpirit.Prestart, &cfg.Tasks.Prestart)
		if !cfg.MachineSpirit.Enabled {
			delete(found, config.ExecutorMachineSpirit)
		} else {
			if err := machineSpiritArgs(&ms, cacheDir, trampoline, pooled, cfg); err != nil {
				return nil, err
			}
			found[config.ExecutorMachineSpirit] = ms
		}
	}
	var specs []plugin.PluginSpec
	for _, s := range found {
		specs = append(specs, s)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Kind < specs[j].Kind })
	return specs, nil
}

// machineSpiritArgs fits the machinespirit plugin's spec to the config: its
// pinned runtime, handler modules and operator graphs as flags, what its
// confinement must let it read, and its saved-state cache.
func machineSpiritArgs(ms *plugin.PluginSpec, cacheDir, trampoline string, pooled bool, cfg config.Config) error {
	// The pinned runtime travels as flags; the plugin's preflight
	// checks it and reports the result in Describe.
	ms.Args = append(ms.Args, "--swipl", cfg.MachineSpirit.SwiplPath, "--swipl-version", cfg.MachineSpirit.SwiplVersion,
		"--checkpoint-max-bytes", strconv.Itoa(cfg.Tasks.CheckpointMaxBytes),
		"--worker-memory-mb", strconv.Itoa(cfg.MachineSpirit.WorkerMemoryMB),
		"--worker-cpu-seconds", strconv.Itoa(cfg.MachineSpirit.WorkerCPUSeconds),
		"--max-parallel-model-calls", strconv.Itoa(cfg.MachineSpiritParallel()))
	if cfg.MachineSpirit.RLMGoalMode {
		ms.Args = append(ms.Args, "--rlm-goal-mode")
	}
	// The plugin reads each module once, checks its pin on those
	// bytes and loads them; Landlock lets it read only these files.
	for _, name := range slices.Sorted(maps.Keys(cfg.MachineSpirit.HandlerModules)) {
		hm := cfg.MachineSpirit.HandlerModules[name]
		ms.Args = append(ms.Args, "--handler-module", hm.Path+"="+hm.SHA256)
		ms.Confine.ReadOnly = append(slices.Clip(ms.Confine.ReadOnly), hm.Path)
	}
	// Operator graphs: the plugin reads each pinned NAME.pl of the
	// dir once and checks its pin on those bytes.
	if len(cfg.MachineSpirit.GraphPins) > 0 {
		ms.Args = append(ms.Args, "--graphs-dir", cfg.MachineSpirit.GraphsDir)
		for _, name := range slices.Sorted(maps.Keys(cfg.MachineSpirit.GraphPins)) {
			ms.Args = append(ms.Args, "--graph-pin", name+"="+cfg.MachineSpirit.GraphPins[name])
		}
		ms.Confine.ReadOnly = append(slices.Clip(ms.Confine.ReadOnly), cfg.MachineSpirit.GraphsDir)
	}
	// It runs its pinned swipl as a worker process.
	ms.Confine.Subprocesses = true
	ms.Confine.ReadOnly = append(ms.Confine.ReadOnly, cfg.MachineSpirit.SwiplPath)
	if trampoline != "" {
		// Its own binary would do, at ~8 ms more per worker start.
		ms.Args = append(ms.Args, "--trampoline", trampoline)
		ms.Confine.ReadOnly = append(ms.Confine.ReadOnly, trampoline)
	} else {
		// It starts its worker through its own binary, by path:
		// under a uid of its own that path must be reachable.
		ms.Confine.ReadOnly = append(ms.Confine.ReadOnly, ms.Path)
	}
	// Its compiled saved state is kept across starts (~0.4 s each
	// to build), in a cache only the daemon's uid reaches. A
	// plugin under a uid of the pool gets a copy of it per launch
	// (a cache its uid could write would let one task's process
	// plant the state a later task's worker loads); one run as
	// another user builds at every start.
	if ms.Confine.User == "" {
		msCache := filepath.Join(cacheDir, config.ExecutorMachineSpirit)
		if err := os.MkdirAll(msCache, 0o700); err != nil {
			return fmt.Errorf("executor cache dir: %w", err)
		}
		if pooled {
			// A copy per launch, seeded by probes only.
			ms.Confine.SeedCache, ms.Confine.SeedCacheFlag = msCache, "--state-cache-dir"
		} else {
			ms.Args = append(ms.Args, "--state-cache-dir", msCache)
			ms.Confine.ReadWrite = append(slices.Clip(ms.Confine.ReadWrite), msCache)
		}
	}
	return nil
}

// executorDirOf is the directory executors (and the trampoline) are found
// in: dir, or the running binary's when dir is empty ("" when that is
// unknown).
func executorDirOf(dir string) string {
	if dir != "" {
		return dir
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Dir(exe)
}

// settingsFrom maps the config onto the Runner's settings.
func settingsFrom(c config.Config) Settings {
	s := DefaultSettings()
	t := c.Tasks
	s.Disabled = !t.Enabled
	s.MaxConcurrent = t.MaxConcurrent
	s.MaxQueued = t.MaxQueued
	s.MaxSubagents, s.MaxTreeDepth = t.MaxSubagents, t.MaxTreeDepth
	s.DefaultExecutor = t.Executor
	s.Defaults = Limits{Steps: int64(t.MaxSteps), ToolCalls: int64(t.MaxToolCalls), ModelCalls: int64(t.MaxModelCalls), Depth: int64(t.MaxDepth), WallSeconds: int64(t.MaxWallSeconds),
		ModelTokens: int64(t.MaxModelTokens), OutputBytes: int64(t.MaxOutputBytes)}
	s.Caps = Limits{Steps: int64(t.MaxStepsCap), ToolCalls: int64(t.MaxToolCallsCap), ModelCalls: int64(t.MaxModelCallsCap), Depth: int64(t.MaxDepthCap), WallSeconds: int64(t.MaxWallSecondsCap),
		ModelTokens: int64(t.MaxModelTokensCap), OutputBytes: int64(t.MaxOutputBytesCap)}
	s.CheckpointMaxBytes = t.CheckpointMaxBytes
	s.MaxParallelModelCalls = t.MaxParallelModelCalls
	s.GoalChars = c.Limits.GoalChars
	s.SummaryChars = c.Limits.SummaryChars
	s.RecentSummaries = c.Limits.RecentSummaries
	s.ResultBytes = c.Limits.ResultBytes
	s.Model = ModelSettings{MaxTokens: c.Model.MaxTokens, ContextTokens: c.Model.ContextTokens}
	f := c.Fleet
	s.Fleet = FleetSettings{Heartbeat: time.Duration(f.HeartbeatSeconds) * time.Second,
		Lease: time.Duration(f.LeaseSeconds) * time.Second, Poll: time.Duration(f.PollMillis) * time.Millisecond}
	return s
}

// trampolinePath is where the dedicated trampoline was found, for
// machinespirit's worker, which starts through it from inside its own
// confinement; "" when there is none.
func (h *Host) trampolinePath() string {
	if h.trampoline == nil {
		return ""
	}
	return h.trampoline.path
}
