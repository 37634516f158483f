// Package machinespirit is MACHINE-SPIRIT, taskhost's Prolog graph/effect
// executor: a go-plugin executor built with sdk/ that drives one pinned
// SWI-Prolog worker process per running task.
//
// One host step runs exactly one graph node in the worker. Every effect
// the Prolog code makes (model, tool, approval, sub-run, progress) is a
// request frame to this plugin, which performs it through sdk.Host: the
// host counts, gates, records and cancels each one. The state between
// steps is the worker's checkpoint snapshot (CheckpointSchema); the worker
// itself keeps nothing a resume would need.
//
// A node that interrupts pauses the task: its step commits the checkpoint
// with the interrupt's question pending, and the next step asks the task's
// principal that question (sdk.Host.RequestInput, the task waiting in
// waiting_approval) before anything else, then runs the next node with the
// answer. A restart during the wait asks again on resume; an answer given
// is replayed by the host to a re-run of its step, never asked twice.
//
// Failure policy:
//   - the runtime is pinned and checked at start-up (Describe reports
//     Runtime["preflight"]); a failed preflight refuses every step, there
//     is no fallback runtime;
//   - a malformed frame from the worker kills it and fails the step
//     (executor_failed): it is a bug, and a re-run would repeat it;
//   - a worker that dies during a step (crash, out of memory, killed) is
//     an interrupted attempt, never a completion: Config.OnWorkerLost is
//     called, and the plugin binary exits with status 4 there, so that the
//     host sees a plugin that died during a step and records
//     executor_crashed / interrupted. A resume then starts a new worker
//     from the last committed checkpoint.
package machinespirit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/sdk"
)

const (
	// Kind is the executor kind the host knows this plugin by.
	Kind = "machinespirit"
	// Version is the executor's own version.
	Version = "0.1.0"

	// DefaultMaxFrameBytes bounds one protocol frame, both directions.
	DefaultMaxFrameBytes = 1 << 20
	// DefaultCancelGrace is how long a cancelled step waits for the worker
	// to acknowledge the cancel before it is killed.
	DefaultCancelGrace = 500 * time.Millisecond
	// DefaultKillGrace is the time between SIGTERM and SIGKILL.
	DefaultKillGrace = 500 * time.Millisecond
	// DefaultMaxParallelModelCalls bounds the model calls a step has in
	// flight at once (a plan's map with parallel > 1); MaxParallelModelCalls
	// is the most Config.MaxParallelModelCalls may ask for.
	DefaultMaxParallelModelCalls = 4
	MaxParallelModelCalls        = 16

	maxSummaryChars = 2000
	// effectDrainTimeout bounds the wait for a cancelled host call.
	effectDrainTimeout = 2 * time.Second
	maxFailMessage     = 1500

	// codeResourceExhausted starts the message of a step that failed
	// because the worker hit one of its resource limits.
	codeResourceExhausted = "resource_exhausted"
)

// StartMode is how a worker starts.
type StartMode string

const (
	// StartFromState compiles the sources into a saved state once, at
	// start-up, and starts every worker from it (~30 ms instead of ~110+).
	StartFromState StartMode = "state"
	// StartFromSource loads the sources at every worker start.
	StartFromSource StartMode = "source"
)

// ErrWorkerLost is the error of a step whose worker died during it.
var ErrWorkerLost = errors.New("the Prolog worker died during the step")

// Config configures an Executor. The host passes the pinned runtime on the
// plugin's command line (--swipl, --swipl-version).
type Config struct {
	SwiplPath    string // absolute path of swipl
	SwiplVersion string // exact pinned version, e.g. "9.0.4"

	// GraphsDir holds operator graphs NAME.pl; only those with a pin in
	// GraphPins (name -> lowercase hex SHA-256 of the file) are loaded.
	GraphsDir string
	GraphPins map[string]string

	// HandlerModules are operator handler modules (at most
	// MaxHandlerModules, each at most MaxHandlerModuleBytes), each pinned
	// by the SHA-256 of its file; their handlers and routers join the
	// worker's trusted registry (handlermodules.go).
	HandlerModules []HandlerModule

	CheckpointMaxBytes  int   // default DefaultCheckpointMaxBytes
	MaxFrameBytes       int   // default DefaultMaxFrameBytes
	StackLimitBytes     int64 // the worker's stack limit; default 512 MiB
	TaskStackLimitBytes int64 // each run's thread; default 256 MiB

	// The worker's resource limits (RLIMIT_AS, RLIMIT_CPU), within
	// [MinWorker*, MaxWorker*]; defaults DefaultWorkerMemoryBytes and
	// DefaultWorkerCPUSeconds. A step whose worker hits one fails with a
	// message starting "machinespirit: resource_exhausted:".
	WorkerMemoryBytes int64
	WorkerCPUSeconds  int64

	// Trampoline is the binary that confines the worker (see
	// internal/confine): its main must call confine.Main first. Default:
	// this process's own executable. Every worker is started through it;
	// if it cannot confine, the preflight fails (check "confine").
	Trampoline string

	// RLMGoalMode registers the rlm_goals graph, whose root model writes
	// Prolog goals run behind an allow-list. Off by default: the rlm graph
	// reads typed JSON plans and runs no model text.
	RLMGoalMode bool

	// MaxParallelModelCalls is how many model calls of one step may be in
	// flight at once (1..MaxParallelModelCalls, default
	// DefaultMaxParallelModelCalls). Only model calls run concurrently; a
	// worker that starts more, or any other effect while one is in flight,
	// breaks the protocol and is killed.
	MaxParallelModelCalls int

	StartMode StartMode // default StartFromState
	// StateCacheDir, absolute, keeps the built saved state across plugin
	// starts (see statecache.go); "" builds it at every start. A directory
	// that is missing or unusable only costs the cache (logged).
	StateCacheDir string
	CancelGrace   time.Duration // default DefaultCancelGrace
	KillGrace     time.Duration // default DefaultKillGrace

	// OnWorkerLost is called when the worker dies during a step, before
	// Step returns an error wrapping ErrWorkerLost. The plugin binary
	// exits the process there (see the package comment).
	OnWorkerLost func(error)

	Logger hclog.Logger

	// extraSources are trusted Prolog files compiled into the worker
	// besides the embedded ones. Only this package's tests set them.
	extraSources map[string][]byte
}

func (c Config) withDefaults() Config {
	if c.CheckpointMaxBytes <= 0 {
		c.CheckpointMaxBytes = DefaultCheckpointMaxBytes
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.StackLimitBytes <= 0 {
		c.StackLimitBytes = 512 << 20
	}
	if c.TaskStackLimitBytes <= 0 {
		c.TaskStackLimitBytes = 256 << 20
	}
	if c.WorkerMemoryBytes == 0 {
		c.WorkerMemoryBytes = DefaultWorkerMemoryBytes
	}
	if c.WorkerCPUSeconds == 0 {
		c.WorkerCPUSeconds = DefaultWorkerCPUSeconds
	}
	if c.StartMode == "" {
		c.StartMode = StartFromState
	}
	if c.MaxParallelModelCalls == 0 {
		c.MaxParallelModelCalls = DefaultMaxParallelModelCalls
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = DefaultCancelGrace
	}
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Executor is the machinespirit sdk.Executor. One plugin process serves
// one task, so one Executor drives at most one worker; two Executors share
// nothing.
type Executor struct {
	cfg Config
	// ready is closed when the preflight is done: desc, env, preErr and
	// sources are written before, and only read after.
	ready       chan struct{}
	cancelStart context.CancelFunc

	desc    sdk.Description
	env     *runtimeEnv // nil when the preflight failed
	preErr  error
	sources string // digest of the sources

	mu     sync.Mutex // guards worker and closed against Close
	worker *worker
	closed bool
	runSeq int64
}

var _ sdk.Executor = (*Executor)(nil)

// New runs the preflight and returns the executor. It never fails: a
// failed preflight is reported by Describe and refuses every Step, so the
// host can tell the operator why instead of seeing a plugin that would
// not start.
func New(ctx context.Context, cfg Config) *Executor {
	e := Start(ctx, cfg)
	<-e.ready
	return e
}

// Start is New without the wait: the preflight runs in the background, so
// that the plugin's handshake with the host overlaps the worker's start.
// Describe and Step wait for it, so nothing reports the runtime, and no
// step runs, before the preflight has passed or failed; Close cancels it.
func Start(ctx context.Context, cfg Config) *Executor {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(ctx)
	e := &Executor{cfg: cfg, ready: make(chan struct{}), cancelStart: cancel}
	go func() {
		defer close(e.ready)
		e.start(ctx)
	}()
	return e
}

// Identity is the kind and version, known before the preflight ends
// (sdk.Identifier): the SDK validates them without waiting for Describe.
func (e *Executor) Identity() (kind, version string) { return Kind, Version }

// start runs the preflight and writes its outcome into e.
func (e *Executor) start(ctx context.Context) {
	cfg := e.cfg
	var version string
	var graphs []string
	e.env, version, graphs, e.preErr = e.preflight(ctx)
	if e.preErr != nil {
		cfg.Logger.Error("machinespirit preflight failed", "error", e.preErr)
	}
	preflight := "ok"
	if e.preErr != nil {
		preflight = "failed: " + truncate(e.preErr.Error(), 1500)
	}
	if version == "" {
		version = "unknown"
	}
	e.desc = sdk.Description{
		Kind:              Kind,
		Version:           Version,
		CheckpointSchemas: []string{CheckpointSchema},
		Capabilities:      []string{"graphs", "rlm", "effects", "cancel"},
		Runtime: map[string]string{
			"prolog_version": version,
			"sources_sha256": e.sources,
			"preflight":      preflight,
			"start_mode":     string(cfg.StartMode),
			"graphs":         strings.Join(graphs, ","),
		},
	}
	if e.env != nil {
		e.desc.Runtime["worker_confinement"] = e.env.policy.Summary(confine.Probe())
		if e.env.stateFrom != "" {
			e.desc.Runtime["saved_state"] = e.env.stateFrom
		}
		if len(e.env.opModules) > 0 {
			e.desc.Runtime["handler_modules"] = moduleSummary(e.env.opModules)
		}
	}
}

// openStateCache returns the saved-state cache of cfg.StateCacheDir, or
// nil when there is none to use. Only a relative path fails the
// preflight (it is a wrong flag); a directory that cannot be used is
// logged and the state is built as without a cache.
func (e *Executor) openStateCache() (*stateCache, error) {
	dir := e.cfg.StateCacheDir
	if dir == "" || e.cfg.StartMode != StartFromState {
		return nil, nil
	}
	if !filepath.IsAbs(dir) {
		return nil, failCheck("state_cache_dir", "%q is not an absolute path (--state-cache-dir)", truncate(dir, 200))
	}
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is not a directory", dir)
	}
	if err != nil {
		e.cfg.Logger.Warn("saved-state cache dir not usable; building the state at every start", "dir", dir, "error", err)
		return nil, nil
	}
	return &stateCache{dir: dir, max: maxStateBytes, logger: e.cfg.Logger}, nil
}

// preflight checks the pinned runtime and keeps the worker it started for
// the first step.
func (e *Executor) preflight(ctx context.Context) (*runtimeEnv, string, []string, error) {
	src, err := embeddedSources(e.cfg.extraSources)
	if err != nil {
		return nil, "", nil, failCheck("sources", "%w", err)
	}
	e.sources = src.digest()
	if err := checkBinary(e.cfg.SwiplPath); err != nil {
		return nil, "", nil, err
	}
	switch e.cfg.StartMode {
	case StartFromState, StartFromSource:
	default:
		return nil, "", nil, failCheck("start_mode", "unknown start mode %q", e.cfg.StartMode)
	}
	if err := checkLimits(e.cfg); err != nil {
		return nil, "", nil, err
	}
	trampoline := e.cfg.Trampoline
	if trampoline == "" {
		if trampoline, err = os.Executable(); err != nil {
			return nil, "", nil, failCheck("confine", "the trampoline: %w", err)
		}
	}
	sweepRuntimeDirs(e.cfg.Logger)
	dir, err := os.MkdirTemp("", runtimeDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, "", nil, failCheck("sources", "%w", err)
	}
	env := &runtimeEnv{dir: dir, path: e.cfg.SwiplPath, env: workerEnv(dir)}
	fail := func(err error) (*runtimeEnv, string, []string, error) {
		_ = os.RemoveAll(dir)
		return nil, env.version, nil, err
	}
	work, err := makeWorkDir(dir)
	if err != nil {
		return fail(failCheck("confine", "%w", err))
	}
	env.work, env.trampoline = work, trampoline
	env.policy = workerPolicy(e.cfg, dir, work)
	if env.cache, err = e.openStateCache(); err != nil {
		return fail(err)
	}
	env.version, env.versionLine, err = cachedVersion(ctx, env.cache, e.cfg.SwiplPath, e.cfg.SwiplVersion, env.env)
	if err != nil {
		return fail(err)
	}
	env.stateKey = stateKey(e.sources, e.cfg.SwiplPath, env.versionLine)
	if env.opGraphs, err = readOperatorGraphs(e.cfg.GraphsDir, e.cfg.GraphPins); err != nil {
		return fail(err)
	}
	if env.opModules, err = readHandlerModules(e.cfg.HandlerModules); err != nil {
		return fail(err)
	}
	if err := prepareRuntime(ctx, e.cfg, src, env); err != nil {
		return fail(err)
	}
	w, graphs, err := helloWorker(ctx, e.cfg, env)
	if err != nil && env.stateFrom == stateCached {
		// A state that hashes right but does not load (a swipl changed in
		// place under the same version line) is built again, once.
		e.cfg.Logger.Warn("the worker did not start from the cached saved state; building it again", "error", err)
		env.cache.drop(env.stateKey)
		env.stateFrom = stateRebuilt
		if err := buildState(ctx, e.cfg, src, env); err != nil {
			return fail(err)
		}
		w, graphs, err = helloWorker(ctx, e.cfg, env)
	}
	if err != nil {
		return fail(err)
	}
	env.graphs = graphs
	e.worker = w
	return env, env.version, graphs, nil
}

// Describe reports the executor and its runtime facts, once the
// preflight is done.
func (e *Executor) Describe() sdk.Description {
	<-e.ready
	d := e.desc
	d.CheckpointSchemas = append([]string(nil), e.desc.CheckpointSchemas...)
	d.Capabilities = append([]string(nil), e.desc.Capabilities...)
	d.Runtime = make(map[string]string, len(e.desc.Runtime))
	for k, v := range e.desc.Runtime {
		d.Runtime[k] = v
	}
	return d
}

// Close stops the worker and removes the runtime's temp dir.
func (e *Executor) Close() {
	e.cancelStart()
	<-e.ready
	e.mu.Lock()
	w := e.worker
	e.worker = nil
	e.closed = true
	e.mu.Unlock()
	if w != nil {
		w.close(e.cfg.KillGrace)
	}
	if e.env != nil {
		_ = os.RemoveAll(e.env.dir)
	}
}

// workerPID is the pid of the current worker, 0 if none (for tests).
func (e *Executor) workerPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.worker == nil {
		return 0
	}
	return e.worker.pid
}

// ensureWorker returns the running worker, starting one if there is none
// (first step after a failure, a cancel, or a worker that died idle).
func (e *Executor) ensureWorker(ctx context.Context) (*worker, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errors.New("machinespirit: executor closed")
	}
	w := e.worker
	e.mu.Unlock()
	if w != nil && w.alive() {
		return w, nil
	}
	if w != nil {
		e.cfg.Logger.Warn("worker died between steps; starting a new one", "pid", w.pid, "exit", w.exitDescription())
		e.dropWorker(w)
	}
	w, _, err := helloWorker(ctx, e.cfg, e.env)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		go w.kill(e.cfg.KillGrace)
		return nil, errors.New("machinespirit: executor closed")
	}
	e.worker = w
	return w, nil
}

// dropWorker forgets w (if it is current) and makes sure it is gone.
func (e *Executor) dropWorker(w *worker) {
	e.mu.Lock()
	if e.worker == w {
		e.worker = nil
	}
	e.mu.Unlock()
	w.kill(e.cfg.KillGrace)
}

// Step runs one node of the task's graph.
func (e *Executor) Step(ctx context.Context, host sdk.Host, req sdk.StepRequest) (sdk.StepResult, error) {
	select {
	case <-e.ready:
	case <-ctx.Done():
		return sdk.StepResult{}, ctx.Err()
	}
	if e.preErr != nil {
		return sdk.Fail("executor_failed", truncate(fmt.Sprintf("machinespirit: %v: %v", errNoPreflight, e.preErr), maxFailMessage)), nil
	}
	sp, err := parseSpec(req.Spec)
	if err != nil {
		return sdk.Fail("executor_failed", truncate("machinespirit: spec: "+err.Error(), maxFailMessage)), nil
	}
	cp, hdr, err := readCheckpoint(req.Checkpoint, sp.Graph, e.cfg.CheckpointMaxBytes)
	if err != nil {
		return sdk.Fail("checkpoint_incompatible", truncate("machinespirit: "+err.Error(), maxFailMessage)), nil
	}
	// The question first: asked before any other host call of the step,
	// it keeps its place in the step, so a re-run replays its answer.
	resume, res, stop, err := e.askInterrupt(ctx, host, hdr.Interrupt)
	if stop {
		return res, err
	}
	if res, stop := e.resolveIndeterminate(ctx, host, req); stop {
		return res, nil
	}
	w, err := e.ensureWorker(ctx)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return sdk.StepResult{}, fmt.Errorf("machinespirit: step cancelled: %w", ctxErr)
		}
		return sdk.StepResult{}, fmt.Errorf("machinespirit: starting the worker: %w", err)
	}

	e.mu.Lock()
	e.runSeq++
	runID := e.runSeq
	e.mu.Unlock()
	run := runFrame{
		Type: "run", ID: runID, Graph: sp.Graph, Input: sp.Input, Goal: sp.Goal,
		Checkpoint: cp, CheckpointMaxBytes: e.cfg.CheckpointMaxBytes, Resume: resume,
		Children: childFrames(req.Children),
	}
	if sp.ContextFile != "" {
		cf := sp.ContextFile
		run.ContextFile = &cf
	}
	st := &stepState{
		e: e, w: w, host: host, req: req, runID: runID,
		execution: hdr.Executions + 1, tokenDepth: map[string]int{},
	}
	if err := w.send(run); err != nil {
		if errors.Is(err, errFrameTooLarge) {
			return sdk.Fail("executor_failed", truncate("machinespirit: "+err.Error(), maxFailMessage)), nil
		}
		return st.lost(err)
	}
	return st.loop(ctx)
}

// askInterrupt asks the task's principal the question of a pending
// interrupt (none: nothing to do) and returns the answer for the run. A
// refusal of the host ends the step: stop is set, with a result or, when
// the step's context ended, an error.
func (e *Executor) askInterrupt(ctx context.Context, host sdk.Host, intr *cpInterrupt) (*resumeFrame, sdk.StepResult, bool, error) {
	if intr == nil {
		return nil, sdk.StepResult{}, false, nil
	}
	v, err := host.RequestInput(ctx, intr.Reason)
	switch {
	case err == nil:
		return &resumeFrame{Value: v}, sdk.StepResult{}, false, nil
	case ctx.Err() != nil:
		return nil, sdk.StepResult{}, true, fmt.Errorf("machinespirit: step cancelled while waiting for an answer: %w", ctx.Err())
	}
	// A rejection has already failed the task; this answer only matters
	// when the host could not ask at all.
	return nil, sdk.Fail("executor_failed", truncate(fmt.Sprintf("machinespirit: node %s paused on a question that got no answer: %v", truncate(intr.Node, 64), err), maxFailMessage)), true, nil
}

// resolveIndeterminate applies the policy for effects that were in flight
// when an earlier attempt died. Model calls, approvals and progress notes
// change nothing outside and may run again; a tool call may have, so
// re-running its node needs a human's approval. Without one the task
// fails with effect_indeterminate.
func (e *Executor) resolveIndeterminate(ctx context.Context, host sdk.Host, req sdk.StepRequest) (sdk.StepResult, bool) {
	var tools []string
	for _, ef := range req.Indeterminate {
		if ef.Kind == "tool" {
			tools = append(tools, truncate(ef.Summary, 100))
		}
	}
	if len(tools) == 0 {
		return sdk.StepResult{}, false
	}
	prompt := truncate(fmt.Sprintf("machinespirit: %d tool call(s) were in flight when attempt %d died and may or may not have happened: %s. Re-run the node (its tool calls run again)?",
		len(tools), req.Attempt-1, strings.Join(tools, "; ")), 2000)
	d, err := host.RequestApproval(ctx, prompt)
	switch {
	case err != nil:
		return sdk.Fail("effect_indeterminate", truncate("machinespirit: indeterminate tool effects and no approval to re-run them: "+err.Error(), maxFailMessage)), true
	case d != sdk.Approved:
		return sdk.Fail("effect_indeterminate", "machinespirit: re-running the node with indeterminate tool effects was rejected"), true
	}
	return sdk.StepResult{}, false
}

// stepState is one step in flight.
type stepState struct {
	e         *Executor
	w         *worker
	host      sdk.Host
	req       sdk.StepRequest
	runID     int64
	execution int64
	effectSeq int
	// tokenDepth records the depth the host reported for each model call
	// of this step, to admit sub-runs against the depth budget. Model
	// calls may run concurrently: mu guards it.
	mu         sync.Mutex
	tokenDepth map[string]int
	// offered is the host's tool list, asked once a step for the first
	// model call with tools (such calls run one at a time).
	offered   []sdk.ToolSpec
	offeredOK bool
}

// admissionKind is what an effect counts as when it asks to run beside
// others: a model call with tools runs tool calls, so it runs alone.
func admissionKind(f *inFrame) string {
	if f.Kind == "model" && len(f.Tools) > 0 {
		return "model-with-tools"
	}
	return f.Kind
}

type effectDone struct {
	id    int64
	frame effectResultFrame
}

// loop serves the worker's frames until the run's result, a cancel, or
// the worker's end.
func (st *stepState) loop(ctx context.Context) (sdk.StepResult, error) {
	effs := newInFlight(ctx, st.e.cfg.MaxParallelModelCalls)
	// No host call of this step may outlive it.
	defer effs.drain(st.e.cfg.Logger)
	exited := st.w.exited
	var exitTimer <-chan time.Time

	for {
		select {
		case m, ok := <-st.w.frames:
			if !ok {
				return st.lost(errors.New("the worker closed its output"))
			}
			if m.err != nil {
				var pe *protocolError
				if errors.As(m.err, &pe) {
					return st.malformed(m.err)
				}
				return st.lost(m.err)
			}
			f := m.f
			switch f.Type {
			case "effect":
				if err := effs.start(st, f); err != nil {
					return st.malformed(err)
				}
			case "error":
				// The worker reports why it is about to exit.
				return st.lost(fmt.Errorf("the worker reported %s: %s", truncate(f.Code, 64), truncate(f.Message, 500)))
			case "result":
				if *f.ID != st.runID {
					return st.malformed(fmt.Errorf("result for run %d during run %d", *f.ID, st.runID))
				}
				return st.result(f)
			default:
				return st.malformed(fmt.Errorf("unexpected %s frame during a run", f.Type))
			}
		case d := <-effs.done:
			effs.ended()
			if ctx.Err() != nil {
				continue // the cancel case below answers
			}
			if err := st.reply(d); err != nil {
				return st.lost(err)
			}
		case <-exited:
			// Frames it sent before dying may still be in the pipe: keep
			// reading until the stream ends, but not for ever.
			exited = nil
			exitTimer = time.After(time.Second)
		case <-exitTimer:
			return st.lost(errors.New("the worker exited"))
		case <-ctx.Done():
			return st.cancel(ctx)
		}
	}
}

// inFlight are a step's effects running as host calls: at most max at
// once, each answered on done; only model calls run beside each other.
type inFlight struct {
	ctx    context.Context // the calls' context, cancelled by drain
	cancel context.CancelFunc
	done   chan effectDone
	n, max int
	kind   string // the kind of those in flight, "" when none is
}

func newInFlight(ctx context.Context, limit int) *inFlight {
	ctx, cancel := context.WithCancel(ctx)
	return &inFlight{ctx: ctx, cancel: cancel, done: make(chan effectDone, limit), max: limit}
}

// start admits effect frame f and performs it as host call number
// st.effectSeq+1; a frame past the admission bound is the error.
func (ef *inFlight) start(st *stepState, f *inFrame) error {
	kind := admissionKind(f)
	if err := checkAdmission(kind, ef.kind, ef.n, ef.max); err != nil {
		return err
	}
	ef.n++
	ef.kind = kind
	st.effectSeq++
	go func(f *inFrame, seq int) {
		ef.done <- effectDone{id: *f.ID, frame: st.perform(ef.ctx, f, seq)}
	}(f, st.effectSeq)
	return nil
}

// ended counts one answered call out.
func (ef *inFlight) ended() {
	ef.n--
	if ef.n == 0 {
		ef.kind = ""
	}
}

// drain cancels the calls still in flight and waits for them, bounded:
// host calls honour their context, but a step must return even if one
// did not.
func (ef *inFlight) drain(log hclog.Logger) {
	ef.cancel()
	deadline := time.After(effectDrainTimeout)
	for ; ef.n > 0; ef.n-- {
		select {
		case <-ef.done:
		case <-deadline:
			log.Warn("a host call did not end after its step was over")
			return
		}
	}
}

// checkAdmission bounds the effects in flight: only model calls run side
// by side, and at most max of them. The worker's plan asks for its
// parallelism; this is what bounds it.
func checkAdmission(kind, inFlightKind string, inFlight, max int) error {
	switch {
	case inFlight > 0 && (kind != "model" || inFlightKind != "model"):
		return fmt.Errorf("a %s effect while a %s effect is in flight (only model calls without tools run concurrently)", truncate(kind, 32), inFlightKind)
	case inFlight >= max:
		return fmt.Errorf("more than %d model calls in flight at once", max)
	}
	return nil
}

// reply sends an effect's result to the worker; one too large for a frame
// is sent as a too_large error instead.
func (st *stepState) reply(d effectDone) error {
	d.frame.Type, d.frame.ID = "effect_result", d.id
	err := st.w.send(d.frame)
	if errors.Is(err, errFrameTooLarge) {
		err = st.w.send(effectResultFrame{Type: "effect_result", ID: d.id, Error: &effectError{Kind: "too_large", Message: truncate(err.Error(), 500)}})
	}
	return err
}

// cancel asks the worker to abandon the run (thread_signal in its task
// thread) and kills it when it does not answer within the grace.
func (st *stepState) cancel(ctx context.Context) (sdk.StepResult, error) {
	cause := fmt.Errorf("machinespirit: step cancelled: %w", ctx.Err())
	e, w := st.e, st.w
	if err := w.send(cancelFrame{Type: "cancel", ID: st.runID}); err != nil {
		e.dropWorker(w)
		return sdk.StepResult{}, cause
	}
	grace := time.NewTimer(e.cfg.CancelGrace)
	defer grace.Stop()
	for {
		select {
		case m, ok := <-w.frames:
			if !ok || m.err != nil {
				e.cfg.Logger.Warn("the worker's output ended while cancelling", "error", m.err)
				e.dropWorker(w)
				return sdk.StepResult{}, cause
			}
			switch f := m.f; {
			case f.Type == "result" && *f.ID == st.runID:
				// Acknowledged: the worker is idle again and may serve the
				// next step of this task.
				return sdk.StepResult{}, cause
			case f.Type == "effect":
				// The run is being cancelled; do not leave its thread
				// waiting for an answer that would never come.
				if err := w.send(effectResultFrame{Type: "effect_result", ID: *f.ID, Error: &effectError{Kind: "cancelled", Message: "the step was cancelled"}}); err != nil {
					e.dropWorker(w)
					return sdk.StepResult{}, cause
				}
			default:
				e.cfg.Logger.Warn("unexpected frame while cancelling; killing the worker", "type", f.Type, "id", f.ID, "run", st.runID)
				e.dropWorker(w)
				return sdk.StepResult{}, cause
			}
		case <-w.exited:
			e.dropWorker(w)
			return sdk.StepResult{}, cause
		case <-grace.C:
			e.cfg.Logger.Warn("worker ignored the cancel; killing it", "pid", w.pid)
			e.dropWorker(w)
			return sdk.StepResult{}, cause
		}
	}
}

// malformed kills the worker over a protocol violation and fails the step.
func (st *stepState) malformed(err error) (sdk.StepResult, error) {
	st.e.dropWorker(st.w)
	st.e.cfg.Logger.Error("worker broke the protocol; killed it", "pid", st.w.pid, "error", err)
	return sdk.Fail("executor_failed", truncate("machinespirit: "+err.Error(), maxFailMessage)), nil
}

// lost reports a worker that died during the step: never a completion.
func (st *stepState) lost(cause error) (sdk.StepResult, error) {
	e, w := st.e, st.w
	e.dropWorker(w)
	if why, ok := resourceDeath(w.exitErr, e.cfg.WorkerCPUSeconds, w.stderr.String()); ok {
		// Not a crash of the plugin or the host: the task's own code
		// used up what a worker may use. The step fails; the next one
		// starts a new worker.
		e.cfg.Logger.Warn("worker hit a resource limit", "pid", w.pid, "why", why, "exit", w.exitDescription())
		return sdk.Fail("executor_failed", truncate(fmt.Sprintf("machinespirit: %s: %s (worker %s)", codeResourceExhausted, why, w.exitDescription()), maxFailMessage)), nil
	}
	err := fmt.Errorf("%w: %v (worker %s)", ErrWorkerLost, cause, w.exitDescription())
	if tail := w.stderr.String(); tail != "" {
		err = fmt.Errorf("%w; stderr: %s", err, truncate(tail, 1000))
	}
	e.mu.Lock()
	closing := e.closed
	e.mu.Unlock()
	if closing {
		// Close killed it: the plugin is being stopped, not crashing.
		return sdk.StepResult{}, fmt.Errorf("machinespirit: the executor was closed during the step: %w", err)
	}
	e.cfg.Logger.Error("worker lost during a step", "pid", w.pid, "error", err)
	if e.cfg.OnWorkerLost != nil {
		e.cfg.OnWorkerLost(err)
	}
	return sdk.StepResult{}, err
}

// result turns the worker's result frame into the step's result.
func (st *stepState) result(f *inFrame) (sdk.StepResult, error) {
	max := st.e.cfg.CheckpointMaxBytes
	summary := []rune(f.Summary)
	if len(summary) > maxSummaryChars {
		summary = summary[:maxSummaryChars]
	}
	switch f.Outcome {
	case "continue", "interrupt", "complete":
		cp, err := makeCheckpoint(f.Checkpoint, max)
		if err != nil {
			var tooLarge *checkpointTooLarge
			if errors.As(err, &tooLarge) {
				return sdk.Fail("checkpoint_too_large", "machinespirit: "+err.Error()), nil
			}
			return st.malformed(err)
		}
		if f.Outcome != "complete" {
			return sdk.Continue(string(summary), cp), nil
		}
		res, err := compactJSON(f.Result)
		if err != nil {
			return st.malformed(err)
		}
		return sdk.Complete(string(summary), res, cp), nil
	case "fail":
		reason := "executor_failed"
		switch f.Code {
		case "checkpoint_incompatible", "checkpoint_too_large":
			reason = f.Code
		case codeResourceExhausted:
			// The worker survived running out of memory, but its heap may
			// be fragmented or full of what the goal left behind: the next
			// step gets a fresh one. The host has no reason of its own for
			// this; the message starts with the code.
			st.e.dropWorker(st.w)
		}
		return sdk.Fail(reason, truncate(fmt.Sprintf("machinespirit: %s: %s", f.Code, f.Message), maxFailMessage)), nil
	}
	// "cancelled" without a cancel.
	return st.malformed(fmt.Errorf("outcome %q without a cancel", f.Outcome))
}

func compactJSON(raw json.RawMessage) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, &protocolError{msg: "result is not JSON", err: err}
	}
	return b.Bytes(), nil
}
