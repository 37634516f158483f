// Package host is the taskhost engine: it owns the task lifecycle, runs each
// task's steps through an out-of-process executor, and persists every
// decision in the store.
//
// The Runner knows executors only through the plain seam of host/plugin
// (plugin.Launcher, plugin.Executor, and the plugin.Services it serves each
// process); it decides what every answer, error and crash means for the task
// (classify.go) and what an effect costs (effects.go). Launching, pins,
// confinement and the wire are host/plugin's; a test drives the Runner with
// a fake Launcher in-process (seam_test.go).
package host

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// Settings are the Runner's limits and defaults (DESIGN §3, §8, §9).
type Settings struct {
	// Disabled refuses every create and resume ([tasks] enabled = false):
	// the host still serves reads, cancels and approvals.
	Disabled      bool
	MaxConcurrent int
	// MaxQueued bounds the store's pending tasks ([tasks] max_queued):
	// a create or resume beyond MaxConcurrent waits in the queue, and one
	// beyond MaxQueued is refused (store.QueueFullError).
	MaxQueued int
	// MaxSubagents and MaxTreeDepth bound a task tree ([tasks]
	// max_subagents, max_tree_depth; tree.go).
	MaxSubagents, MaxTreeDepth int
	// Solo is a foreground host (taskhost run): a create or resume starts
	// at once, whatever is queued, and the host starts nothing from the
	// queue (a daemon's queue is the daemon's to run).
	Solo            bool
	DefaultExecutor string
	Defaults        Limits // applied when a request leaves a budget at zero
	Caps            Limits // a request above a cap is refused

	GoalChars          int
	SpecBytes          int
	SummaryChars       int
	RecentSummaries    int
	CheckpointMaxBytes int
	ResultBytes        int

	// Heartbeat is how often active wall time is persisted (at most 5 s).
	Heartbeat time.Duration
	// Observer is told of plugin starts, crashes and step durations; nil
	// tells no one.
	Observer Observer
	// Fleet are the timings of a host sharing its store (fleet.go).
	Fleet FleetSettings
	// Model bounds a task's own model options (spec "model").
	Model ModelSettings
	// MaxParallelModelCalls bounds the model calls of one step in flight
	// at once, whatever its executor ([tasks] max_parallel_model_calls);
	// the others wait for a slot. 0 means DefaultMaxParallelModelCalls.
	MaxParallelModelCalls int
}

// Limits are budget limits; zero means "unset" in a request.
type Limits struct {
	Steps, ToolCalls, ModelCalls, Depth int64
	WallSeconds                         int64
	ModelTokens, OutputBytes            int64
}

// DefaultSettings mirrors DESIGN §8 and §9.
func DefaultSettings() Settings {
	return Settings{
		MaxConcurrent:      2,
		MaxQueued:          32,
		MaxSubagents:       8,
		MaxTreeDepth:       2,
		DefaultExecutor:    "legacy",
		Defaults:           Limits{Steps: 20, ToolCalls: 50, ModelCalls: 100, Depth: 1, WallSeconds: 1800, ModelTokens: 1_000_000, OutputBytes: 64 << 20},
		Caps:               Limits{Steps: 200, ToolCalls: 1000, ModelCalls: 2000, Depth: 4, WallSeconds: 86400, ModelTokens: store.UnbudgetedModelTokens, OutputBytes: store.UnbudgetedOutputBytes},
		GoalChars:          2000,
		SpecBytes:          16384,
		SummaryChars:       2000,
		RecentSummaries:    5,
		CheckpointMaxBytes: 256 << 10,
		ResultBytes:        64 << 10,
		Heartbeat:          5 * time.Second,
		Fleet:              FleetSettings{Heartbeat: 5 * time.Second, Lease: 30 * time.Second, Poll: 250 * time.Millisecond},

		MaxParallelModelCalls: DefaultMaxParallelModelCalls,
	}
}

// Sentinel errors of the Runner's API; match with errors.Is.
var (
	ErrInvalid      = plugin.ErrInvalid // a *plugin.FieldError
	ErrBusy         = errors.New("concurrency limit reached")
	ErrShuttingDown = errors.New("host is shutting down")
	ErrDisabled     = errors.New("tasks are disabled on this host ([tasks] enabled = false): set it to true to create or resume tasks")
	ErrNotFound     = store.ErrNotFound
	ErrConflict     = store.ErrConflict
)

// BusyError reports the concurrency limit. It matches ErrBusy.
type BusyError struct{ Limit int }

func (e *BusyError) Error() string {
	return fmt.Sprintf("%d tasks are already running (tasks.max_concurrent = %d): nothing is queued, try again when one ends", e.Limit, e.Limit)
}
func (e *BusyError) Is(t error) bool { return t == ErrBusy }

// Runner runs tasks. It is safe for concurrent use.
type Runner struct {
	store    *store.Store
	launcher plugin.Launcher
	set      Settings
	seal     sealer
	log      hclog.Logger
	turns    *turns
	svc      ServiceConfig
	// workspaceRoot holds one workspace directory per task.
	workspaceRoot string

	mu       sync.Mutex
	runs     map[string]*run // by task id
	reserved int
	closing  bool
	changed  chan struct{}      // closed and replaced whenever events are appended
	waiters  map[string]*waiter // by approval id: steps blocked on an approval
	// degraded holds, by task id, the ends runs decided but the store has
	// not recorded yet (it refused the write); readers see them.
	degraded map[string]degradedTask
	// stopped is closed when Shutdown starts: writes stop being retried.
	stopped  chan struct{}
	stopOnce sync.Once
	// queueMu serialises this host's starts of queued tasks; the queue
	// loop is started once (queueOnce).
	queueMu   sync.Mutex
	queueOnce sync.Once
	// treeMu serialises this host's settling of task trees, so that two
	// settles do not both act on one tree's rules.
	treeMu sync.Mutex
	wg     sync.WaitGroup
	// beat is what the fleet duties know of this host's heartbeats.
	beat beatState
	// hostBeat is the host heartbeat's write: store.HeartbeatHost, or a
	// test's failing one.
	hostBeat func(ctx context.Context) error
}

// NewRunner returns a Runner over st. key is the data dir's host key (32 bytes).
func NewRunner(st *store.Store, l plugin.Launcher, key []byte, set Settings, svc ServiceConfig, workspaceRoot string, log hclog.Logger) *Runner {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if set.Heartbeat <= 0 || set.Heartbeat > 5*time.Second {
		set.Heartbeat = 5 * time.Second
	}
	if set.Observer == nil {
		set.Observer = NopObserver{}
	}
	if set.MaxQueued <= 0 || set.MaxQueued > store.MaxQueueLimit {
		set.MaxQueued = DefaultSettings().MaxQueued
	}
	if set.MaxSubagents < 1 || set.MaxSubagents > store.MaxSubagentsLimit {
		set.MaxSubagents = DefaultSettings().MaxSubagents
	}
	if set.MaxTreeDepth < 1 || set.MaxTreeDepth > store.MaxTreeDepthLimit {
		set.MaxTreeDepth = DefaultSettings().MaxTreeDepth
	}
	if f, d := &set.Fleet, DefaultSettings().Fleet; f.Heartbeat <= 0 || f.Lease <= 2*f.Heartbeat || f.Poll <= 0 {
		*f = d
	}
	return &Runner{
		store: st, launcher: l, set: set, seal: sealer{key: key}, log: log, hostBeat: st.HeartbeatHost,
		turns: newTurns(), runs: map[string]*run{}, changed: make(chan struct{}),
		svc: svc, workspaceRoot: workspaceRoot, waiters: map[string]*waiter{},
		degraded: map[string]degradedTask{}, stopped: make(chan struct{}),
	}
}

// Recover is the host's start-up step: every task this host (its store's
// host id) or no host left running or waiting becomes interrupted
// (host_restart) and its lost active time is charged in full; another
// host's tasks are left to the lost-host sweep. Nothing resumes on its own.
func (r *Runner) Recover(ctx context.Context) (store.Recovery, error) {
	rec, err := r.store.Recover(ctx, r.set.Heartbeat.Milliseconds(), func(t store.Task) []store.NewEvent {
		return []store.NewEvent{
			newEvent(EventStepInterrupted, t, EventPayload{Reason: string(store.ReasonHostRestart)}),
			newEvent(EventTaskInterrupted, t, EventPayload{Reason: string(store.ReasonHostRestart)}),
		}
	})
	r.notify()
	if err == nil {
		// A blocked parent of a task the crash interrupted goes down
		// with it, and so does the rest of its tree.
		r.settleTrees(ctx)
	}
	return rec, err
}

// CreateRequest is a new task.
type CreateRequest struct {
	Executor string // empty: the default executor
	Spec     []byte // JSON object with at least "goal"
	Limits   Limits // zero fields take the defaults
	// Files are placed in the task's workspace before its first step.
	Files []File
}

// Create validates req and records the task at the tail of the queue,
// then starts the head of the queue while slots are free: with a free slot
// and nothing queued before it, the task is running when Create returns;
// otherwise it is pending and starts, in FIFO order, when a slot frees on
// any host. Beyond the queue's bound it refuses (store.QueueFullError) and
// records nothing.
func (r *Runner) Create(ctx context.Context, principal string, req CreateRequest) (store.Task, error) {
	if req.Executor == "" {
		req.Executor = r.set.DefaultExecutor
	}
	if err := r.validateSpec(req.Spec); err != nil {
		return store.Task{}, err
	}
	limits, err := r.limits(req.Limits)
	if err != nil {
		return store.Task{}, err
	}
	if err := validateFiles(req.Files); err != nil {
		return store.Task{}, err
	}
	if _, err := r.preflight(ctx, req.Executor); err != nil {
		return store.Task{}, err
	}
	if err := r.accepting(); err != nil {
		return store.Task{}, err
	}
	nt := store.NewTask{ID: newTaskID(), PrincipalID: principal, Executor: req.Executor, Spec: req.Spec, Limits: limits,
		Workspace: seedChange(req.Files)}
	// The workspace is seeded before the row exists: a task is never
	// visible without the files its creator gave it.
	if err := r.seedWorkspace(nt.ID, req.Files); err != nil {
		os.RemoveAll(r.workspace(nt.ID))
		return store.Task{}, err
	}
	ev := newEvent(EventTaskCreated, store.Task{ID: nt.ID, Executor: nt.Executor, Status: store.StatusPending, Budgets: limits}, EventPayload{})
	t, started, err := r.createNow(ctx, nt, len(req.Files) > 0, ev)
	if err != nil {
		os.RemoveAll(r.workspace(nt.ID))
		return store.Task{}, err
	}
	if started {
		return t, nil
	}
	return r.admitted(ctx, t)
}

// Resume continues an interrupted task: same id, run id + 1, the last
// committed checkpoint and what is left of every budget. With a free slot
// and nothing queued it starts at once; otherwise it joins the tail of the
// queue (pending, a task.queued event) and starts in its turn. Resuming a
// pending task leaves it where it is in the queue.
func (r *Runner) Resume(ctx context.Context, principal, id string) (store.Task, error) {
	t, err := r.store.GetTask(ctx, principal, id)
	if err != nil {
		return store.Task{}, err
	}
	if err := r.degradedErr(principal, id); err != nil {
		return store.Task{}, err
	}
	if t.Status != store.StatusInterrupted && t.Status != store.StatusPending {
		return store.Task{}, &store.TransitionError{TaskID: id, Current: t.Status, To: store.StatusRunning}
	}
	if err := r.parentDown(ctx, t); err != nil {
		return store.Task{}, err
	}
	// A run that just ended (a pause, a crash) may still be stopping its
	// plugin here: the new run starts once it is gone.
	if err := r.Wait(ctx, id); err != nil {
		return store.Task{}, err
	}
	if r.svc.Tools != nil {
		if err := r.svc.Tools.CheckWorkspace(id); err != nil {
			return store.Task{}, err
		}
	}
	if _, err := r.preflight(ctx, t.Executor); err != nil {
		return store.Task{}, err
	}
	if err := r.accepting(); err != nil {
		return store.Task{}, err
	}
	if t.Status == store.StatusPending {
		return r.admitted(ctx, t)
	}
	if live, err := r.hasLiveChildren(ctx, principal, id); err != nil {
		return store.Task{}, err
	} else if live {
		// It waits for its children again, which resume with it.
		return r.resumeTree(ctx, principal, id)
	}
	if started, ok, err := r.startIfIdle(ctx, t); ok || err != nil {
		return started, err
	}
	queued := t
	queued.Status = store.StatusPending
	if t, err = r.store.Enqueue(ctx, principal, id, r.set.MaxQueued, newEvent(EventTaskQueued, queued, EventPayload{})); err != nil {
		return store.Task{}, err
	}
	r.notify()
	return r.admitted(ctx, t)
}

// liveChecker is a Launcher that checks an executor against its binary on
// disk now rather than as registered; *Registry is one.
type liveChecker interface {
	Check(ctx context.Context, kind string) (plugin.Description, error)
}

// preflight says whether kind can run now: a binary rebuilt since it was
// registered is refused here, before a task is created or moved, not at
// launch.
func (r *Runner) preflight(ctx context.Context, kind string) (plugin.Description, error) {
	if c, ok := r.launcher.(liveChecker); ok {
		return c.Check(ctx, kind)
	}
	return r.launcher.Describe(kind)
}

func (r *Runner) reserve() error {
	if err := r.accepting(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.runs)+r.reserved >= r.set.MaxConcurrent {
		return &BusyError{Limit: r.set.MaxConcurrent}
	}
	r.reserved++
	return nil
}

func (r *Runner) unreserve() {
	r.mu.Lock()
	r.reserved--
	r.mu.Unlock()
}

// start moves t to running and launches its run. The caller holds a
// reservation, which the new run takes over.
func (r *Runner) start(ctx context.Context, t store.Task, eventType string) (store.Task, error) {
	next := t
	next.Status, next.RunID = store.StatusRunning, t.RunID+1
	t, err := r.store.StartRun(ctx, t.PrincipalID, t.ID, t.Status, newEvent(eventType, next, EventPayload{}))
	r.notify()
	if err != nil {
		return store.Task{}, err
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	ru := &run{
		r: r, id: t.ID, principal: t.PrincipalID, runID: t.RunID, task: t,
		ctx: runCtx, cancel: cancel, done: make(chan struct{}),
		wall: newWallClock(t.Budgets.WallMillis),
	}
	r.mu.Lock()
	// The run holds a slot from here; the caller's reservation is released
	// after this returns, so the slot is never free in between.
	r.runs[t.ID] = ru
	r.wg.Add(1)
	if r.closing {
		// Shutdown began after the reservation: it has cancelled the runs
		// it saw, so this one ends itself.
		ru.cancel(errShutdown)
	}
	r.mu.Unlock()
	go ru.loop()
	return t, nil
}

// finished removes a run once its goroutine is done.
func (r *Runner) finished(ru *run) {
	r.mu.Lock()
	if r.runs[ru.id] == ru {
		delete(r.runs, ru.id)
	}
	if !r.closing {
		// A slot is free: the queue's head may start. Off this goroutine,
		// so that the run's end is never held up by the queue.
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			// The run's end may wake, fail or stop others of its tree.
			r.settleTrees(context.Background())
			if len(r.dispatch(context.Background())) > 0 {
				r.notify()
			}
		}()
	}
	r.mu.Unlock()
	close(ru.done)
	r.wg.Done()
}

// Cancel cancels a task: the cancelled status commits first, then the step
// in flight is cancelled through its context into the plugin, and Cancel
// waits (bounded by ctx) for the run to wind down. Cancelling a cancelled
// task is a no-op; cancelling a completed or failed one is a conflict.
func (r *Runner) Cancel(ctx context.Context, principal, id string) (store.Task, error) {
	return r.cancelFor(ctx, principal, id, store.ReasonUserCancelled)
}

// cancelFor is Cancel for reason: user_cancelled, or user_stop_all.
func (r *Runner) cancelFor(ctx context.Context, principal, id string, reason store.Reason) (store.Task, error) {
	_, done, err := r.cancelNoWait(ctx, principal, id, reason)
	if err != nil {
		return store.Task{}, err
	}
	// Its subtree is cancelled with it.
	r.settleTrees(ctx)
	if done != nil {
		waitDone(ctx, done)
	}
	return r.store.GetTask(ctx, principal, id)
}

// cancelNoWait commits the cancel and signals the local run, if any,
// without waiting: done is closed when the run has wound down (nil: no
// run here).
func (r *Runner) cancelNoWait(ctx context.Context, principal, id string, reason store.Reason) (store.Task, <-chan struct{}, error) {
	cur, err := r.store.GetTask(ctx, principal, id)
	if err != nil {
		return store.Task{}, nil, err
	}
	cur = r.liveMeters(cur)
	cur.Status = store.StatusCancelled
	t, err := r.store.CancelFor(ctx, principal, id, reason, newEvent(EventTaskCancelled, cur, EventPayload{Reason: string(reason)}))
	r.notify()
	if err != nil {
		return store.Task{}, nil, err
	}
	return t, r.signalRun(ctx, principal, id, errUserCancelled), nil
}

// Wait blocks until task id has no run in this host, or ctx ends.
func (r *Runner) Wait(ctx context.Context, id string) error {
	r.mu.Lock()
	ru := r.runs[id]
	r.mu.Unlock()
	if ru == nil {
		return nil
	}
	select {
	case <-ru.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Get returns one task of principal.
func (r *Runner) Get(ctx context.Context, principal, id string) (store.Task, error) {
	t, err := r.store.GetTask(ctx, principal, id)
	if err != nil {
		return t, err
	}
	return r.overlay(t), nil
}

// Count counts the tasks List would list over all pages.
func (r *Runner) Count(ctx context.Context, principal string, q store.ListQuery) (int64, error) {
	n, err := r.store.CountTasks(ctx, principal, q)
	if err != nil {
		return n, err
	}
	return n + r.degradedCountDelta(ctx, principal, q), nil
}

// List pages through principal's tasks in q's order.
func (r *Runner) List(ctx context.Context, principal string, q store.ListQuery) ([]store.Task, error) {
	ts, err := r.store.ListTasks(ctx, principal, q)
	for i := range ts {
		ts[i] = r.overlay(ts[i])
	}
	return ts, err
}

// TaskModelUsage returns what the task's model calls cost, in all and by
// attempt.
func (r *Runner) TaskModelUsage(ctx context.Context, principal, id string) (store.ModelUsage, map[int64]store.ModelUsage, error) {
	return r.store.TaskModelUsage(ctx, principal, id)
}

// Attempts lists a task's step attempts.
func (r *Runner) Attempts(ctx context.Context, principal, id string) ([]store.Attempt, error) {
	return r.store.ListAttempts(ctx, principal, id)
}

// Events returns a task's events after seq, waiting until there is at least
// one or ctx ends — or until the task's run has ended without the store
// taking the record of it (store_error), which no event can report yet:
// then it returns none, and Get shows the run's decision.
func (r *Runner) Events(ctx context.Context, principal, id string, after int64) ([]store.Event, error) {
	for {
		r.mu.Lock()
		changed := r.changed
		_, degraded := r.degraded[id]
		r.mu.Unlock()
		evs, err := r.store.Events(ctx, principal, id, after, 100)
		if err != nil || len(evs) > 0 || degraded {
			return evs, err
		}
		// Another host of a fleet may run the task: its events reach this
		// store without a local change, so the store is read again each
		// poll interval too.
		poll := time.NewTimer(r.set.Fleet.Poll)
		select {
		case <-changed:
		case <-poll.C:
		case <-ctx.Done():
			poll.Stop()
			return nil, ctx.Err()
		}
		poll.Stop()
	}
}

// liveMeters is t with the wall time its run has consumed so far, when it
// has a run in this host: the store holds that only as of the last step
// boundary or heartbeat, and an event must never show less than one before
// it did.
func (r *Runner) liveMeters(t store.Task) store.Task {
	r.mu.Lock()
	ru := r.runs[t.ID]
	r.mu.Unlock()
	if ru != nil && ru.runID == t.RunID {
		t.Budgets.WallMillis.Used = max(t.Budgets.WallMillis.Used, ru.wall.used())
	}
	return t
}

func (r *Runner) notify() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Shutdown stops every run: the step in flight is cancelled, the attempt and
// task become interrupted (host_shutdown) and the plugins are stopped. New
// work is refused from the first moment.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stopped) })
	r.mu.Lock()
	r.closing = true
	for _, ru := range r.runs {
		ru.cancel(errShutdown)
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	// Whatever a run could not record itself is recorded here.
	_, err := r.store.InterruptRunning(context.WithoutCancel(ctx), store.ReasonHostShutdown, func(t store.Task) []store.NewEvent {
		return []store.NewEvent{newEvent(EventTaskInterrupted, t, EventPayload{Reason: string(store.ReasonHostShutdown)})}
	})
	r.notify()
	return err
}

// validateSpec checks the spec is a bounded JSON object with a bounded,
// non-empty goal.
func (r *Runner) validateSpec(spec []byte) error {
	if len(spec) > r.set.SpecBytes {
		return &plugin.FieldError{Field: "spec", Message: fmt.Sprintf("is %d bytes, limit %d", len(spec), r.set.SpecBytes)}
	}
	var s struct {
		Goal *string `json:"goal"`
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(spec, &obj); err != nil {
		return &plugin.FieldError{Field: "spec", Message: "must be a JSON object: " + err.Error()}
	}
	if err := json.Unmarshal(spec, &s); err != nil {
		return &plugin.FieldError{Field: "spec.goal", Message: "must be a string"}
	}
	if s.Goal == nil {
		return &plugin.FieldError{Field: "spec.goal", Message: "is required and must not be empty"}
	}
	// As Zara: the goal is stripped (Python's str.strip, which also takes
	// the separators U+001C..U+001F) before it is checked and counted.
	goal := text.PyStrip(*s.Goal)
	if goal == "" {
		return &plugin.FieldError{Field: "spec.goal", Message: "is required and must not be empty (white space and U+001C..U+001F separators alone do not count)"}
	}
	if n := utf8.RuneCountInString(goal); n > r.set.GoalChars {
		return &plugin.FieldError{Field: "spec.goal", Message: fmt.Sprintf("is %d characters once stripped, limit %d", n, r.set.GoalChars)}
	}
	opts, err := parseTaskOptions(spec, r.set.Model)
	if err != nil {
		return err
	}
	return checkTaskTools(opts.Tools, func(name string) bool {
		if r.svc.Tools == nil {
			return false
		}
		pol, ok := r.svc.Tools.Policy(name)
		return ok && pol.Enabled
	})
}

// limits applies defaults and refuses anything above a cap or below zero.
func (r *Runner) limits(req Limits) (store.Budgets, error) {
	pick := func(field string, v, def, cpv int64, min int64) (int64, error) {
		switch {
		case v < 0:
			return 0, &plugin.FieldError{Field: field, Message: fmt.Sprintf("is %d: must not be negative", v)}
		case v == 0:
			v = def
		}
		if v > cpv {
			return 0, &plugin.FieldError{Field: field, Message: fmt.Sprintf("is %d: above the cap of %d", v, cpv)}
		}
		if v < min {
			return 0, &plugin.FieldError{Field: field, Message: fmt.Sprintf("is %d: must be at least %d", v, min)}
		}
		return v, nil
	}
	var b store.Budgets
	var err error
	d, c := r.set.Defaults, r.set.Caps
	if b.Steps.Limit, err = pick("max_steps", req.Steps, d.Steps, c.Steps, 1); err != nil {
		return b, err
	}
	if b.ToolCalls.Limit, err = pick("max_tool_calls", req.ToolCalls, d.ToolCalls, c.ToolCalls, 0); err != nil {
		return b, err
	}
	if b.ModelCalls.Limit, err = pick("max_model_calls", req.ModelCalls, d.ModelCalls, c.ModelCalls, 0); err != nil {
		return b, err
	}
	if b.Depth.Limit, err = pick("max_depth", req.Depth, d.Depth, c.Depth, 0); err != nil {
		return b, err
	}
	if b.ModelTokens.Limit, err = pick("max_model_tokens", req.ModelTokens, d.ModelTokens, c.ModelTokens, 0); err != nil {
		return b, err
	}
	if b.OutputBytes.Limit, err = pick("max_output_bytes", req.OutputBytes, d.OutputBytes, c.OutputBytes, 0); err != nil {
		return b, err
	}
	var wall int64
	if wall, err = pick("max_wall_seconds", req.WallSeconds, d.WallSeconds, c.WallSeconds, 1); err != nil {
		return b, err
	}
	b.WallMillis.Limit = wall * 1000
	return b, nil
}

// newTaskID returns an unguessable task id: 128 random bits.
func newTaskID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "t_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// progress records an executor's progress note as an event.
func (r *Runner) progress(ctx context.Context, tr turn, note string) error {
	t, err := r.store.GetTask(ctx, tr.principal, tr.taskID)
	if err != nil {
		return err
	}
	_, err = r.store.AppendEvents(ctx, tr.principal, tr.taskID, tr.runID,
		newEvent(EventStepProgress, r.liveMeters(t), EventPayload{Attempt: tr.attempt, Note: note}))
	r.notify()
	return err
}
