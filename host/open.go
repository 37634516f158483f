package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// Options configure Open. DataDir through Trampoline, StoreFault and Solo
// are passed to datadir.Open as they are (datadir.Options says what each
// does); Observer and Version are the engine's.
type Options struct {
	DataDir     string
	Config      config.Config
	Logger      hclog.Logger
	Synchronous string
	ExecutorDir string
	Trampoline  string
	// Observer is told what the metrics count as it happens; nil: no one.
	Observer Observer
	// Version is this binary's version, shown in the store's hosts row.
	Version    string
	StoreFault func(committed bool) error
	// Solo is a foreground host (taskhost run): it starts the tasks it is
	// asked to at once and never the queue's (Settings.Solo), and no
	// plugin ahead of a task.
	Solo bool
}

// Host is the engine running on an open data dir (package datadir): its
// Runner over the dir's store, registry and services. Only one Host may
// have a data dir open at a time.
type Host struct {
	Runner   *Runner
	Registry *plugin.Registry
	Store    *store.Store
	DataDir  string
	Recovery store.Recovery
	// Model holds the model provider's preflight result.
	Model *model.Checker

	dir       *datadir.Dir
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the data dir, recovers what a previous
// host left running, and registers every executor. A store that fails its
// checks is an error: the host refuses to run tasks on it.
func Open(ctx context.Context, opts Options) (*Host, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	obs := opts.Observer
	if obs == nil {
		obs = NopObserver{}
	}
	cfg := opts.Config
	dir, err := datadir.Open(ctx, datadir.Options{DataDir: opts.DataDir, Config: cfg, Logger: log, Synchronous: opts.Synchronous,
		ExecutorDir: opts.ExecutorDir, Trampoline: opts.Trampoline, Observer: obs, StoreFault: opts.StoreFault, Solo: opts.Solo})
	if err != nil {
		return nil, err
	}
	h := &Host{dir: dir, Registry: dir.Registry, Store: dir.Store, DataDir: dir.Path}
	fail := func(err error) (*Host, error) {
		dir.Close()
		return nil, err
	}
	set := settingsFrom(cfg)
	set.Solo = opts.Solo
	set.Observer = obs
	svc := ServiceConfig{ApprovalTimeout: time.Duration(cfg.Approvals.TimeoutSeconds) * time.Second, Model: dir.Model, Tools: dir.Tools}
	h.Runner = NewRunner(dir.Store, dir.Registry, dir.Key, set, svc, filepath.Join(dir.Path, datadir.WorkspaceDirName), log.Named("runner"))
	if h.Recovery, err = h.Runner.Recover(ctx); err != nil {
		return fail(fmt.Errorf("start-up recovery: %w", err))
	}
	if err := h.Runner.StartFleet(ctx, opts.Version); err != nil {
		return fail(fmt.Errorf("fleet registration: %w", err))
	}
	if err := dir.RegisterExecutors(ctx); err != nil {
		return fail(err)
	}
	h.Model = dir.StartModelCheck(ctx)
	return h, nil
}

// Close stops every run (DESIGN §6 graceful stop) and closes the data dir.
// Closing a closed Host returns the first Close's error.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.closeErr = errors.Join(h.Runner.Shutdown(ctx), h.dir.Close())
	})
	return h.closeErr
}

// ReloadExecutors applies cfg's executor settings without a restart
// (datadir.Dir.ReloadExecutors).
func (h *Host) ReloadExecutors(ctx context.Context, cfg config.Config) error {
	return h.dir.ReloadExecutors(ctx, cfg)
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
