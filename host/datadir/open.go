package datadir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// Observer is told of the store's commits, retries and fences; nil: no
	// one.
	Observer StoreObserver
	// StoreFault is the store's Options.WriteFault: for fault-injection
	// tests, nil otherwise.
	StoreFault func(committed bool) error
	// Solo is a foreground host (taskhost run): it starts no plugin ahead
	// of a task.
	Solo bool
}

// StoreObserver is told what the store's hooks report; the host's metrics
// observer is one.
type StoreObserver interface {
	StoreCommitted(time.Duration)
	StoreRetried(op string)
	StoreFenced()
}

// nopStoreObserver tells no one.
type nopStoreObserver struct{}

func (nopStoreObserver) StoreCommitted(time.Duration) {}
func (nopStoreObserver) StoreRetried(string)          {}
func (nopStoreObserver) StoreFenced()                 {}

// Dir is an open data dir: its lock, its host key, its store, the plugin
// registry and the services the host gives executors (the model provider
// and the tools). It knows nothing of tasks: the engine (package host) runs
// them on what it holds. Only one Dir may have a data dir open at a time.
type Dir struct {
	// Path is the data dir, absolute.
	Path     string
	Key      []byte
	Store    *store.Store
	Registry *plugin.Registry
	// Model is the model provider; Tools runs the host's tools and is
	// closed with the Dir, so its shell.run commands die with it.
	Model model.Provider
	Tools *tools.Registry

	cfg           config.Config
	log           hclog.Logger
	solo          bool
	executorDir   string      // Options.ExecutorDir, for ReloadExecutors
	trampoline    *trampoline // the dedicated taskhost-confine found and opened, if any
	lock          *os.File
	stopPreflight context.CancelFunc
	preflightDone chan struct{}
	closeOnce     sync.Once
	closeErr      error
}

// ErrDataDirLocked is returned when another taskhost holds the data dir.
var ErrDataDirLocked = errors.New("data dir in use")

// Open opens (creating if needed) the data dir: it checks and locks it,
// loads or makes its key, opens and checks its store, and opens the plugin
// registry and the services. A store that fails its checks is an error:
// no task may run on it. Executors are registered by RegisterExecutors,
// once the engine has recovered what a previous host left running.
func Open(ctx context.Context, opts Options) (*Dir, error) {
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
	// No child — plugin or tool — may read the daemon's /proc environ
	// (its API keys) or memory.
	if err := markNonDumpable(); err != nil {
		return nil, err
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	d := &Dir{Path: dir, cfg: cfg, log: log, solo: opts.Solo, executorDir: opts.ExecutorDir, lock: lock}
	fail := func(err error) (*Dir, error) {
		d.Close()
		return nil, err
	}
	var hostID string
	if d.Key, hostID, err = hostIdentity(dir, cfg); err != nil {
		return fail(err)
	}
	obs := opts.Observer
	if obs == nil {
		obs = nopStoreObserver{}
	}
	if d.Store, err = openStore(ctx, dir, cfg, storeOptions(cfg, opts, obs, hostID)); err != nil {
		return fail(err)
	}
	pool, err := d.openRegistry(cfg, &opts, log)
	if err != nil {
		return fail(err)
	}
	if err := d.openServices(cfg, opts.Trampoline, pool, log); err != nil {
		return fail(err)
	}
	return d, nil
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
func storeOptions(cfg config.Config, opts Options, obs StoreObserver, hostID string) store.Options {
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
func (d *Dir) openRegistry(cfg config.Config, opts *Options, log hclog.Logger) (*uids.Pool, error) {
	if opts.Trampoline == "" {
		var err error
		if d.trampoline, err = findTrampoline(executorDirOf(opts.ExecutorDir)); err != nil {
			log.Warn("plugins start through the taskhost binary instead, about 10 ms slower each", "error", err)
		}
		if d.trampoline != nil {
			log.Info("plugin trampoline", "path", d.trampoline.path, "sha256", d.trampoline.sha256)
			opts.Trampoline = d.trampoline.execPath()
		}
	}
	pool, err := uidPool(cfg.Confinement, log)
	if err != nil {
		return nil, err
	}
	// The data dir is locked: what a dead daemon left of its plugins' run
	// dirs (their tmpfs) is nobody's now.
	if n := plugin.SweepRunDirs(filepath.Join(d.Path, SocketDirName)); n > 0 {
		log.Info("plugin run dirs a previous daemon left removed", "count", n)
	}
	d.Registry, err = plugin.NewRegistry(plugin.PluginOptions{
		UIDs:         pool,
		SocketDir:    filepath.Join(d.Path, SocketDirName),
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
func (d *Dir) openServices(cfg config.Config, trampoline string, pool *uids.Pool, log hclog.Logger) error {
	var err error
	if d.Model, err = model.New(cfg.Model, os.Getenv); err != nil {
		return fmt.Errorf("model provider: %w", err)
	}
	root := filepath.Join(d.Path, WorkspaceDirName)
	if d.Tools, err = tools.New(tools.Options{Tools: cfg.Tools, WorkspaceRoot: root,
		Trampoline: trampoline, RequireConfinement: cfg.Confinement.Required, UIDs: pool, Logger: log.Named("tools")}); err != nil {
		return fmt.Errorf("tools: %w", err)
	}
	for _, err := range untrustedWorkspaces(root, d.Tools.CheckWorkspace) {
		log.Warn("a task's workspace is untrusted: that task's tools refuse it and it cannot be resumed until it is fixed", "error", err)
	}
	if d.Tools.Landlocked() {
		log.Info("shell.run confinement", "confinement", d.Tools.Confinement())
	} else {
		log.Warn("the kernel offers no Landlock: shell.run commands are not confined to their workspace", "confinement", d.Tools.Confinement())
	}
	return nil
}

// RegisterExecutors registers every executor kind the config and the
// executor dir name; one that fails its checks is logged and left
// unavailable, not fatal. Pre-started plugins start from here on.
func (d *Dir) RegisterExecutors(ctx context.Context) error {
	cfg := d.cfg
	specs, err := executorSpecs(d.executorDir, filepath.Join(d.Path, CacheDirName), d.TrampolinePath(), d.Registry.OwnUIDs(), cfg)
	if err != nil {
		return err
	}
	if d.solo {
		// A foreground host runs its one task: nothing to start ahead.
		for i := range specs {
			specs[i].Prestart = 0
		}
	}
	for _, s := range specs {
		if err := d.Registry.Register(ctx, s); err != nil {
			d.log.Warn("executor unavailable", "kind", s.Kind, "error", err)
		}
	}
	if !cfg.MachineSpirit.Enabled {
		d.Registry.MarkUnavailable("machinespirit", "disabled", machineSpiritDisabled)
	}
	return nil
}

// StartModelCheck sets up the model endpoint's check and, with
// [model] preflight, runs it once in the background: a slow endpoint must
// not hold up the start. Close stops it.
func (d *Dir) StartModelCheck(ctx context.Context) *model.Checker {
	cfg := d.cfg
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
	c := model.NewChecker(d.Model, model.Status{Provider: provider, Name: cfg.Model.Name, Preflight: cfg.Model.Preflight}, timeout, d.log.Named("model"))
	if !cfg.Model.Preflight {
		return c
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.stopPreflight = cancel
	d.preflightDone = make(chan struct{})
	go func() {
		defer close(d.preflightDone)
		c.Check(pctx)
	}()
	return c
}

// Close closes what Open opened: the tools (whatever a command left
// behind dies), the registry's plugins, the store and the lock. The
// engine's runs must have ended first. Closing a closed Dir returns the
// first Close's error.
func (d *Dir) Close() error {
	d.closeOnce.Do(func() { d.closeErr = d.close() })
	return d.closeErr
}

func (d *Dir) close() error {
	if d.stopPreflight != nil {
		d.stopPreflight()
		<-d.preflightDone
	}
	var err error
	if d.Tools != nil {
		// The runs have ended, and with them their tool calls; this kills
		// whatever a command left behind all the same.
		err = d.Tools.Close()
	}
	if d.Registry != nil {
		d.Registry.Close()
	}
	d.trampoline.close() //nolint:errcheck // a read-only file: nothing to lose
	if d.Store != nil {
		d.Store.Close()
	}
	if d.lock != nil {
		// Unlocked first: a child forked by another goroutine holds a copy
		// of this descriptor until it execs, and the flock belongs to the
		// open file both copies share, so a close alone would leave the dir
		// locked against the next Open of this process.
		syscall.Flock(int(d.lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // the close below releases it otherwise
		d.lock.Close()
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

// SweepRunDirs removes what the plugins of a dead daemon on the data dir
// at path left under the system temp dir: their run dirs, each a tmpfs
// mounted where every process sees it, which a SIGKILL leaves mounted
// until the next start on the data dir sweeps it. A data dir that is never
// opened again (a test's) is swept by whoever ended its last daemon; every
// one left mounts one more tmpfs that each mount table read walks. Call it
// only while no daemon runs on the data dir. It returns how many it
// removed.
func SweepRunDirs(path string) int {
	return plugin.SweepRunDirs(filepath.Join(path, SocketDirName))
}
