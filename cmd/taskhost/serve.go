package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/taskhost/taskhost/internal/uids"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/api"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/metrics"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// stopTimeout bounds a graceful stop: tasks interrupted, plugins stopped,
// calls in flight finished.
const stopTimeout = 15 * time.Second

func serveCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var hf hostFlags
	hf.register(fs)
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	logFile := fs.String("log-file", "", "append the log to this file (created 0600) instead of stderr; SIGHUP reopens it, for log rotation")
	fs.Lookup("log-level").DefValue = "info"
	_ = fs.Set("log-level", "info")
	fs.Usage = usageFunc(fs, "taskhost serve [--data-dir DIR] [--config FILE] [--log-format text|json] [--log-level LEVEL]",
		"Runs the taskhost daemon: opens the data dir (one daemon per data dir), serves\nthe API on DATA-DIR/"+api.SocketName+" and, when [api] tcp_listen is set, on a\nloopback token listener. SIGTERM or SIGINT stops it gracefully: running tasks\nbecome interrupted (host_shutdown), plugins are stopped, the store is closed.\nSIGHUP never stops it: it reopens --log-file and re-reads the config file's\nexecutor settings. Logs go to stderr, or to --log-file.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if *logFormat != "text" && *logFormat != "json" {
		errorf(e, "serve: --log-format must be text or json, not %q", *logFormat)
		return exitUsage
	}
	if hclog.LevelFromString(hf.logLevel) == hclog.NoLevel {
		errorf(e, "serve: --log-level must be trace, debug, info, warn, error or off, not %q", hf.logLevel)
		return exitUsage
	}
	cfg, err := hf.loadConfig()
	if err != nil {
		errorf(e, "%v", err)
		return exitUsage
	}
	// Ignored from the start: a hangup before the daemon is up must not
	// end it either. runDaemon acts on them once it serves.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var out io.Writer = e.stderr
	var lf *reopenFile
	if *logFile != "" {
		if lf, err = openLogFile(*logFile); err != nil {
			errorf(e, "serve: --log-file: %v", err)
			return exitUsage
		}
		defer lf.Close()
		out = lf
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name: "taskhost", Output: out, Level: hclog.LevelFromString(hf.logLevel),
		JSONFormat: *logFormat == "json", TimeFormat: time.RFC3339Nano,
	})
	// Libraries that log through the standard logger (go-plugin's broker)
	// go through hclog too, so the log stays one format.
	stdlog.SetFlags(0)
	stdlog.SetOutput(log.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}))
	o := daemonOptions{dataDir: hf.dataDir, cfg: cfg, hangups: hup, loadConfig: hf.loadConfig}
	if lf != nil {
		o.reopenLog = lf.Reopen
	}
	return runDaemon(ctx, e, log, o, nil)
}

type daemonOptions struct {
	dataDir string
	cfg     config.Config
	// executorDir is where the executor binaries are (default: beside
	// this binary).
	executorDir string
	// hangups are the SIGHUPs the daemon acts on, once it serves: it
	// reopens its log (reopenLog, when set) and reloads the executor
	// settings (from loadConfig, when set; also for the API's
	// ReloadExecutors). Nil: none of it.
	hangups    <-chan os.Signal
	reopenLog  func() error
	loadConfig func() (config.Config, error)
	// solo: a foreground host (taskhost run), host.Options.Solo.
	solo bool
}

// configReloader applies the config file's executor settings to a running
// host, for SIGHUP and the API's ReloadExecutors.
type configReloader struct {
	load func() (config.Config, error)
	h    *host.Host
	log  hclog.Logger
}

func (c configReloader) ReloadExecutors(ctx context.Context) error {
	cfg, err := c.load()
	if err != nil {
		return err
	}
	if err := c.h.ReloadExecutors(ctx, cfg); err != nil {
		return err
	}
	for _, kind := range c.h.Registry.Kinds() {
		if _, err := c.h.Registry.Describe(kind); err != nil {
			c.log.Warn("executor unavailable after reload", "kind", kind, "error", err)
		}
	}
	return nil
}

// serveHangups acts on each SIGHUP until ctx ends: the log is reopened
// first (so what follows lands in the new file), then the executor
// settings are reloaded. A failure is logged; the daemon serves on.
func serveHangups(ctx context.Context, log hclog.Logger, hup <-chan os.Signal, reopen func() error, reload reloadFunc) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if reopen != nil {
			if err := reopen(); err != nil {
				log.Error("SIGHUP: the log file could not be reopened; logging goes on to the old one", "error", err)
			}
		}
		if reload == nil {
			log.Info("SIGHUP received: the daemon keeps running")
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := reload(rctx)
		cancel()
		if err != nil {
			log.Error("SIGHUP received: the executor config was not reloaded; the old one stays", "error", err)
			continue
		}
		log.Info("SIGHUP received: log reopened, executor config reloaded; the daemon keeps running")
	}
}

// reloadFunc reloads the executor settings.
type reloadFunc func(ctx context.Context) error

// runDaemon serves until ctx ends. ready, when set, receives the socket path
// once the API is up.
func runDaemon(ctx context.Context, e *env, log hclog.Logger, o daemonOptions, ready chan<- string) int {
	cfg := o.cfg
	principals, gid, code := daemonIdentity(e, cfg)
	if code != exitOK {
		return code
	}
	inst := metrics.NewInstruments() // counts from the start, whether or not /metrics is served
	h, err := openDaemonHost(ctx, log, o, inst)
	if err != nil {
		if errors.Is(err, datadir.ErrDataDirLocked) {
			errorf(e, "%v; a second daemon on the same data dir is refused", err)
		} else {
			errorf(e, "%v", err)
		}
		return exitUnavailable
	}
	stopCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	}
	closeHost := func() {
		sctx, cancel := stopCtx()
		defer cancel()
		if err := h.Close(sctx); err != nil {
			log.Error("stop", "error", err)
		}
	}
	var reloader api.ExecutorReloader
	if o.loadConfig != nil {
		reloader = configReloader{load: o.loadConfig, h: h, log: log}
	}
	srv, err := newAPIServer(h, cfg, principals, reloader, log)
	if err != nil {
		closeHost()
		errorf(e, "%v", err)
		return exitUnavailable
	}
	ln, err := listenDaemon(h, cfg, gid, inst, log)
	if err != nil {
		closeHost()
		errorf(e, "%v", err)
		return exitUnavailable
	}
	met := ln.met
	srv.Serve(ln.unix)
	tcpAddr := ""
	if ln.tcp != nil {
		srv.Serve(ln.tcp)
		tcpAddr = ln.tcp.Addr().String()
	}
	met.serving()
	log.Info("serving", "metrics", met.addr, "data_dir", h.DataDir, "socket", ln.unix.Addr().String(), "tcp", tcpAddr,
		"principals", len(principals), "tokens", len(cfg.API.Tokens), "pid", os.Getpid(), "version", version)
	if ready != nil {
		ready <- ln.unix.Addr().String()
	}

	serveBackground(ctx, log, o, reloader, h.Runner, cfg.Tasks.RetentionDays)
	log.Info("stopping: running tasks become interrupted (host_shutdown)")
	sctx, cancel := stopCtx()
	defer cancel()
	met.stop(sctx)
	// Tasks first, so their watchers see them interrupted; then the API;
	// then the data dir.
	if err := h.Runner.Shutdown(sctx); err != nil {
		log.Error("stop tasks", "error", err)
	}
	srv.Stop(sctx)
	closeHost()
	log.Info("stopped")
	return exitOK
}

// daemonIdentity resolves who the API knows: the principals by uid, and
// the socket's group (-1: none). code is exitOK, else what to exit with.
func daemonIdentity(e *env, cfg config.Config) (principals map[uint32]string, gid, code int) {
	principals, err := resolvePrincipals(cfg.Principals)
	if err != nil {
		errorf(e, "%v", err)
		return nil, 0, exitUsage
	}
	gid = -1
	if cfg.API.SocketGroup != "" {
		if gid, err = lookupGroup(cfg.API.SocketGroup); err != nil {
			errorf(e, "api.socket_group: %v", err)
			return nil, 0, exitUsage
		}
	}
	return principals, gid, exitOK
}

// openDaemonHost opens the host on the data dir and logs what its start
// found: the tasks recovery interrupted, the executors not available.
func openDaemonHost(ctx context.Context, log hclog.Logger, o daemonOptions, inst *metrics.Instruments) (*host.Host, error) {
	h, err := host.Open(context.WithoutCancel(ctx), host.Options{DataDir: o.dataDir, Config: o.cfg, Logger: log, ExecutorDir: o.executorDir, Observer: inst, Version: version, Solo: o.solo})
	if err != nil {
		return nil, err
	}
	for _, id := range h.Recovery.Interrupted {
		log.Info("recovered task: it was running when the previous daemon stopped; it is interrupted until resumed", "task", id)
	}
	for _, kind := range h.Registry.Kinds() {
		if _, err := h.Registry.Describe(kind); err != nil {
			log.Warn("executor unavailable", "kind", kind, "error", err)
		}
	}
	return h, nil
}

// serveBackground serves hangups (log reopen, executor reload) and the
// retention sweep until ctx ends, and returns once both have stopped.
func serveBackground(ctx context.Context, log hclog.Logger, o daemonOptions, reloader api.ExecutorReloader, sw sweeper, retentionDays int) {
	var wg sync.WaitGroup
	if o.hangups != nil {
		var reload reloadFunc
		if reloader != nil {
			reload = reloader.ReloadExecutors
		}
		wg.Go(func() { serveHangups(ctx, log, o.hangups, o.reopenLog, reload) })
	}
	wg.Go(func() { sweepRetention(ctx, log.Named("retention"), sw, retentionDays) })
	<-ctx.Done()
	wg.Wait()
}

// newAPIServer is the API over host h, as cfg configures it.
func newAPIServer(h *host.Host, cfg config.Config, principals map[uint32]string, reloader api.ExecutorReloader, log hclog.Logger) (*api.Server, error) {
	return api.New(api.Options{
		Reloader: reloader,
		Tasks:    h.Runner, Events: h.Store, Executors: h.Registry, Model: h.Model,
		Principals: principals, Tokens: cfg.API.Tokens,
		Sandbox:         sandboxRange(cfg.Confinement),
		DefaultExecutor: cfg.Tasks.Executor, Version: version, Logger: log.Named("api"),
		MaxWatchesPerPrincipal: cfg.API.MaxWatchesPerPrincipal,
		MaxRunningPerPrincipal: cfg.Tasks.MaxRunningPerPrincipal,
		WorkspaceRoot:          filepath.Join(h.DataDir, datadir.WorkspaceDirName),
		Deleter:                h.Runner,
		Admins:                 cfg.API.Admins,
		AdminActs:              h.Runner,
		Fleet:                  h.Runner,
		StoredWorkspaces:       h.Runner,
		Effects:                h.Runner,
		Ready:                  hostHealth{h.Store, h.Runner, h.Registry}.Ping,
		Listener: api.ListenerLimits{
			MaxConns:            cfg.API.MaxConnections,
			FirstRequestTimeout: time.Duration(cfg.API.FirstRequestTimeoutSeconds) * time.Second,
		},
	})
}

// daemonListeners are the daemon's open listeners: the API's unix socket,
// its TCP listener when configured, and /metrics.
type daemonListeners struct {
	unix, tcp net.Listener
	met       daemonMetrics
}

// listenDaemon opens every listener cfg asks for, or none.
func listenDaemon(h *host.Host, cfg config.Config, gid int, inst *metrics.Instruments, log hclog.Logger) (daemonListeners, error) {
	var ln daemonListeners
	var err error
	if ln.unix, err = api.ListenUnix(h.DataDir, gid); err != nil {
		return ln, err
	}
	if cfg.API.TCPListen != "" {
		if ln.tcp, err = api.ListenTCP(cfg.API.TCPListen); err != nil {
			ln.unix.Close()
			return ln, err
		}
	}
	if ln.met, err = listenMetrics(log.Named("metrics"), cfg.API.MetricsListen, hostHealth{h.Store, h.Runner, h.Registry}, inst); err != nil {
		ln.unix.Close()
		if ln.tcp != nil {
			ln.tcp.Close()
		}
		return ln, err
	}
	return ln, nil
}

// sweepInterval is how often the daemon applies tasks.retention_days.
const sweepInterval = time.Hour

// sweeper deletes the tasks that finished more than age ago; *host.Runner
// is one.
type sweeper interface {
	Sweep(ctx context.Context, age time.Duration) (int, error)
}

// sweepRetention deletes the tasks that finished more than days ago, at
// once and then every sweepInterval, until ctx ends. days 0 keeps every
// task.
func sweepRetention(ctx context.Context, log hclog.Logger, r sweeper, days int) {
	if days <= 0 {
		return
	}
	age := time.Duration(days) * 24 * time.Hour
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		n, err := r.Sweep(ctx, age)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("retention sweep failed; it is retried at the next one", "deleted", n, "error", err)
		case n > 0:
			log.Info("retention sweep: deleted finished tasks", "deleted", n, "retention_days", days)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resolvePrincipals maps the config's [principals] to uids, adding the
// daemon's own uid as its user name unless listed.
func resolvePrincipals(cfg config.Principals) (map[uint32]string, error) {
	m := make(map[uint32]string, len(cfg)+1)
	for k, name := range cfg {
		uid, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("principals: %q is not a uid", k)
		}
		m[uint32(uid)] = name
	}
	self := uint32(os.Getuid())
	if _, ok := m[self]; !ok {
		m[self] = localPrincipal()
	}
	return m, nil
}

// lookupGroup resolves a group name or numeric gid.
func lookupGroup(g string) (int, error) {
	if n, err := strconv.ParseUint(g, 10, 32); err == nil {
		return int(n), nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(grp.Gid)
	if err != nil {
		return 0, fmt.Errorf("group %s has gid %q", g, grp.Gid)
	}
	return n, nil
}

// hostHealth is the store as health checks see it: degraded when it does
// not answer a read, and also while it refuses this host's writes (a run's
// end waiting for the store, e.g. on a full disk), though reads still work.
type hostHealth struct {
	*store.Store
	runner   *host.Runner
	registry *plugin.Registry
}

// PluginPools are the executors' plugin pools, for /metrics: every kind
// whose pool is on.
func (h hostHealth) PluginPools() []metrics.PluginPool {
	var out []metrics.PluginPool
	for _, kind := range h.registry.Kinds() {
		s := h.registry.PoolStatus(kind)
		if s.Size == 0 {
			continue
		}
		out = append(out, metrics.PluginPool{Executor: kind, Size: s.Size, Idle: s.Idle,
			Served: s.Served, Cold: s.Cold, Started: s.Started, Stale: s.Stale, DiedIdle: s.DiedIdle})
	}
	return out
}

func (h hostHealth) Ping(ctx context.Context) error {
	if err := h.Store.Ping(ctx); err != nil {
		return err
	}
	return h.runner.StoreDegraded()
}

// sandboxRange is the configured range of untrusted processes' uids, which
// the API refuses whether or not this daemon can use it (a root one does).
func sandboxRange(c config.Confinement) uids.Range {
	if c.UIDCount == 0 {
		return uids.Range{}
	}
	return uids.Range{First: c.UIDFirst, Count: c.UIDCount}
}
