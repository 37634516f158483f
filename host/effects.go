package host

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// ServiceConfig is what the host serves executors besides the step itself: the
// model provider, the tools and the approval policy. A nil Model or Tools
// answers Unimplemented.
type ServiceConfig struct {
	Model           model.Provider
	Tools           *tools.Registry
	ApprovalTimeout time.Duration // default 1 h
}

// maxModelMessages bounds one model request.
const (
	maxModelMessages = 256
	maxMessageBytes  = 256 << 10
)

// turnState is what the host knows of one step in flight beyond its identity:
// the effect sequence, the model calls it made (by call token, for depth),
// and the first budget it ran out of.
type turnState struct {
	turn
	// ctx ends with the step, and is derived from the run's context: an
	// effect still running is cut off when the run is cancelled, directly,
	// and at the latest when the step ends, so no tool outlives the step
	// that asked for it.
	ctx      context.Context
	cancel   context.CancelFunc
	inflight sync.WaitGroup
	// modelSlots bounds the step's model calls in flight at once; a
	// replayed call takes none (it does not reach the model).
	modelSlots modelSlots

	mu          sync.Mutex
	seq         int64
	approvalSeq int64
	calls       map[string]int64 // call token → depth
	exhausted   store.Reason
	// exhaustedMsg is the refusal that exhausted it, for the task's
	// message.
	exhaustedMsg string
	// storeErr is the first effect write the store refused: the attempt's
	// ledger is incomplete and the attempt ends interrupted (store_error).
	storeErr error
	// unsettledTools are the task's unresolved tool effects the step was
	// told of (StepRequest.Indeterminate): an approval the executor asks
	// in this step authorizes their retry (RequestApproval).
	unsettledTools []plugin.Effect
	// outage is the last model outage a call of this step met ("" none).
	outage string
	// refusal is the reason the step's last model call failed for the
	// model's reply or the request's length (model_bad_reply,
	// model_context_exceeded) with its message; cleared by a reply.
	refusal, refusalMsg string
	// authRefused is the model endpoint's refusal of the credentials
	// ("" none): no step can succeed until the key is fixed.
	authRefused string
	// charged is the task's budgets after the step's last admitted
	// effect, so the step's events show what it spent.
	charged *store.Budgets
	// opts are the task's own model options and tool list (spec), set
	// when the step is issued, read-only after.
	opts taskOptions
	// usage sums the step's model calls; lastProgress is when a
	// streamed call's progress was last recorded (an event).
	usage        model.Usage
	modelCalls   int64
	lastProgress time.Time

	// replayMu guards replays: the earlier attempts' own runs by
	// fingerprint, read at the step's first model or tool call, and which
	// of them this attempt replayed (each at most once).
	replayMu sync.Mutex
	replays  map[string]*replayPool
}

// replayPool is what a re-run may replay of one fingerprint: the earlier
// attempts' runs in recorded order, and which this attempt has replayed.
type replayPool struct {
	runs []store.EffectRef
	used []bool
}

// take marks as replayed the run at want if it is one not yet replayed,
// else the first not yet replayed, and returns it; false when every run
// was replayed already.
func (p *replayPool) take(want store.EffectRef, exact bool) (store.EffectRef, bool) {
	if exact {
		for i, r := range p.runs {
			if r == want && !p.used[i] {
				p.used[i] = true
				return r, true
			}
		}
	}
	for i, r := range p.runs {
		if !p.used[i] {
			p.used[i] = true
			return r, true
		}
	}
	return store.EffectRef{}, false
}

// addUsage counts one model call of the step.
func (ts *turnState) addUsage(u model.Usage) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.usage = ts.usage.Add(u)
	ts.modelCalls++
}

// stepUsage is what the step's model calls cost so far.
func (ts *turnState) stepUsage() (model.Usage, int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.usage, ts.modelCalls
}

func (ts *turnState) noteCharge(b store.Budgets) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	// Every counter only grows during a run: the larger sum is the later
	// reading, whatever order concurrent calls answered in.
	sum := func(b store.Budgets) int64 {
		return b.ToolCalls.Used + b.ModelCalls.Used + b.ModelTokens.Used + b.OutputBytes.Used
	}
	if ts.charged == nil || sum(b) >= sum(*ts.charged) {
		ts.charged = &b
	}
}

// chargedBudgets returns what the step's effects left of the budgets.
func (ts *turnState) chargedBudgets() (store.Budgets, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.charged == nil {
		return store.Budgets{}, false
	}
	return *ts.charged, true
}

// end cuts off the step's effects still in flight and waits, bounded, until
// they have recorded how they ended, so the ledger is settled before the
// step's outcome commits.
func (ts *turnState) end() {
	ts.cancel()
	done := make(chan struct{})
	go func() { ts.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// approvalSeqBase starts the sequence of a step's approval effects. Replay
// matches an effect by its place in the step, and an executor asks for an
// approval only when a re-run follows a crash (to retry an unsettled
// effect): numbered with the model and tool calls, that approval would
// shift every call after it, and a call the dead attempt saw answered would
// miss its replay and run a second time.
const approvalSeqBase = 1 << 40

func (ts *turnState) nextSeq(kind store.EffectKind) int64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if kind == store.EffectApproval {
		ts.approvalSeq++
		return approvalSeqBase + ts.approvalSeq
	}
	ts.seq++
	return ts.seq
}

// effectless reports whether the step recorded no effect at all: no model,
// tool or approval call reached the ledger.
func (ts *turnState) effectless() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.seq == 0 && ts.approvalSeq == 0
}

func (ts *turnState) exhaust(r store.Reason, msg string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.exhausted == "" {
		ts.exhausted, ts.exhaustedMsg = r, msg
	}
}

func (ts *turnState) storeFailed(err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.storeErr == nil {
		ts.storeErr = err
	}
}

func (ts *turnState) setUnsettled(effs []plugin.Effect) {
	var tools []plugin.Effect
	for _, e := range effs {
		if e.Kind == string(store.EffectTool) {
			tools = append(tools, e)
		}
	}
	ts.mu.Lock()
	ts.unsettledTools = tools
	ts.mu.Unlock()
}

func (ts *turnState) unsettled() []plugin.Effect {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.unsettledTools
}

func (ts *turnState) noteOutage(msg string) {
	ts.mu.Lock()
	ts.outage = msg
	ts.mu.Unlock()
}

func (ts *turnState) noteRefusal(r store.Reason, msg string) {
	ts.mu.Lock()
	ts.refusal, ts.refusalMsg = string(r), msg
	ts.mu.Unlock()
}

// modelRefusal is the reason and message of the step's last model call,
// when it failed for its reply or its length.
func (ts *turnState) modelRefusal() (store.Reason, string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return store.Reason(ts.refusal), ts.refusalMsg
}

func (ts *turnState) noteAuthRefused(msg string) {
	ts.mu.Lock()
	ts.authRefused = msg
	ts.mu.Unlock()
}

func (ts *turnState) modelAuthRefused() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.authRefused
}

func (ts *turnState) modelOutage() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.outage
}

// modelError is the *ModelError a failed model call reaches the executor
// with: an outage (rate_limited, server, timeout) is unavailable, a failure
// for good (auth, request, bad_response) is not. Each failed call is logged
// once, at WARN, with its task.
func (s *taskServices) modelError(ts *turnState, err error) error {
	kind := model.KindOf(err).SDKName()
	msg := err.Error()
	if merr, ok := errors.AsType[*model.Error](err); ok {
		msg = merr.Message
	}
	log := []any{"task", ts.taskID, "attempt", ts.attempt, "kind", kind, "error", msg}
	me := &plugin.ModelError{Kind: kind, Message: msg}
	switch {
	case model.KindOf(err) == model.KindAuth:
		ts.noteAuthRefused(msg)
		s.r.log.Warn("model refused the credentials", log...)
	case model.Unavailable(err):
		me.Unavailable = true
		ts.noteOutage(kind)
		s.r.log.Warn("model unavailable", log...)
	case model.KindOf(err) == model.KindBadReply:
		ts.noteRefusal(store.ReasonModelBadReply, msg)
		s.r.log.Warn("model reply not usable", log...)
	case model.KindOf(err) == model.KindContextExceeded:
		ts.noteRefusal(store.ReasonModelContextExceeded, msg)
		s.r.log.Warn("model request longer than the model's context", log...)
	default:
		s.r.log.Warn("model call failed", log...)
	}
	return me
}

// rerunSafe reports whether running tool call (name, args) twice is the same
// as running it once, so that its retry needs no approval: reading, waiting,
// and writing a whole file with the same content. Anything else — shell.run,
// an append, a tool the host does not know — is not.
func rerunSafe(name string, args []byte) bool {
	switch name {
	case tools.ToolWorkspaceRead, tools.ToolTimeSleep, tools.ToolTaskList, tools.ToolTaskStatus:
		return true
	case tools.ToolWorkspaceWrite:
		var a struct {
			Append *bool `json:"append"`
		}
		return json.Unmarshal(args, &a) == nil && (a.Append == nil || !*a.Append)
	}
	return false
}

// replayRule says whether an effect may be answered from an earlier
// attempt of its step instead of running.
type replayRule bool

const (
	replayEarlier replayRule = true
	// replayNever: the effect runs again on a re-run of its step. A
	// workspace tool's and shell.run's do: the earlier attempt did not
	// commit, so the run that re-runs the step started from the
	// workspace as of the last committed step (host/workspace.go),
	// without what the earlier run wrote; answering from the ledger would
	// claim a write whose file is gone, or a read of a file as it no
	// longer is.
	replayNever replayRule = false
)

// toolReplay is a tool's replayRule: the workspace tools and shell.run
// answer of the workspace, which a re-run's run restored, so they run
// again.
func toolReplay(name string) replayRule {
	switch name {
	case tools.ToolWorkspaceWrite, tools.ToolWorkspaceRead, tools.ToolWorkspaceList, tools.ToolShellRun:
		return replayNever
	}
	return replayEarlier
}

// idempotentMark ends the ledger summary of a tool effect the executor
// marked idempotent under its key (sdk.ToolRequest.Idempotent).
const idempotentMark = " (idempotent)"

// idempotentRetry reports whether e may run again after prev, the same call
// an earlier attempt left unsettled, without an approval: both were marked
// idempotent under the same key, which the tool honours. A call marked so
// only now is not: its first run recorded no key, so the tool could not
// tell it happened.
func idempotentRetry(e store.NewEffect, prev store.Effect) bool {
	return e.IdempotencyKey != "" && e.IdempotencyKey == prev.IdempotencyKey &&
		strings.HasSuffix(e.Summary, idempotentMark) && strings.HasSuffix(prev.Summary, idempotentMark)
}

// noteWriteErr records a failed effect write that no answer reports.
func (ts *turnState) noteWriteErr(err error) {
	if errors.Is(err, store.ErrUnavailable) {
		ts.storeFailed(err)
	}
}

func (ts *turnState) storeError() error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.storeErr
}

func (ts *turnState) exhaustedReason() (store.Reason, string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.exhausted, ts.exhaustedMsg
}

// depthOf resolves a parent call token of this turn: the root call has depth
// 0 and each recursion adds one. A token this turn did not issue is refused:
// an executor cannot pick its own depth.
func (ts *turnState) depthOf(parent string) (int64, bool) {
	if parent == "" {
		return 0, true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	d, ok := ts.calls[parent]
	return d + 1, ok
}

func (ts *turnState) addCall(depth int64) string {
	tok := randomToken()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.calls == nil {
		ts.calls = map[string]int64{}
	}
	ts.calls[tok] = depth
	return tok
}

// effectView is a ledger entry as an executor sees it.
func effectView(e store.Effect) plugin.Effect {
	return plugin.Effect{Attempt: e.Attempt, Seq: e.Seq, Kind: string(e.Kind), Fingerprint: e.Fingerprint,
		IdempotencyKey: e.IdempotencyKey, Status: string(e.Status), Summary: e.Summary}
}

// effectError turns a ledger refusal into the host's refusal the executor
// sees and remembers an exhausted budget on the turn, which fails the task
// when the step ends.
func effectError(ts *turnState, err error) error {
	var be *store.BudgetError
	switch {
	case errors.As(err, &be):
		r := be.Budget.Reason()
		ts.exhaust(r, be.Error())
		return &plugin.BudgetError{Reason: string(r), Err: err}
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %w", plugin.ErrStepEnded, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, store.ErrUnavailable):
		// The store refused the write: the step cannot go on recording
		// its effects, so it ends interrupted (store_error) whatever the
		// executor does with this answer.
		ts.storeFailed(err)
		return fmt.Errorf("effect %w: %w", plugin.ErrNotRecorded, err)
	}
	return fmt.Errorf("effect not recorded: %w", err)
}

func fingerprint(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// gateFunc waits for the approval an effect needs before it is dispatched
// and returns the approval's id. rerun are the unsettled effects of the
// task the call would run again (the gate's prompt says so; the approval is
// bound to them).
type gateFunc func(seq int64, rerun []store.Effect) (approvalID string, err error)

// runFunc runs an admitted effect and says what it cost of the token and
// output budgets.
type runFunc func(ctx context.Context) ([]byte, store.Charge, error)

// ledgered runs one effect through the ledger: replay from an earlier
// attempt of the same step if (seq, fingerprint) was observed there, else
// take one of the step's model call slots (a model call; it waits for one
// while the step has max_parallel_model_calls in flight), pass the
// unsettled-effect gate (rerunGate), admit (charging its budget),
// wait for an approval when gate says so, mark dispatching, run, and record
// observed, with the bounded result and its charge, or failed. An effect
// whose charge takes the task past its token or output budget is refused
// to the executor after it ran (overBudget); so is a replay in a task that
// is past one already.
func (s *taskServices) ledgered(callCtx context.Context, ts *turnState, e store.NewEffect, gate gateFunc, rerunSafe bool, replay replayRule, run runFunc) ([]byte, bool, error) {
	ts.inflight.Add(1)
	defer ts.inflight.Done()
	// The effect's context derives from the step's, not from the
	// executor's call: a cancel committed on this host reaches the tool
	// through the context tree at once, without waiting for the executor
	// to hear of it and drop its call. The call ending (the executor gave
	// up on it) ends the effect too. Nothing below reads a value of the
	// call's context.
	ctx, cancel := context.WithCancel(ts.ctx)
	defer cancel()
	stop := context.AfterFunc(callCtx, cancel)
	defer stop()
	st := s.r.store
	e.PrincipalID, e.TaskID, e.RunID, e.Attempt = ts.principal, ts.taskID, ts.runID, ts.attempt
	e.Seq = ts.nextSeq(e.Kind)
	if replay == replayEarlier {
		if result, ok, err := s.replay(ctx, ts, e); err != nil || ok {
			return result, ok, err
		}
	}
	if e.Kind == store.EffectModel {
		// After the replay, which reaches no model, and before admission:
		// a call that waits for a slot is charged when it starts, and one
		// cancelled while it waits charges nothing and is never recorded.
		release, err := ts.modelSlots.acquire(ctx)
		if err != nil {
			return nil, false, err
		}
		defer release()
	}
	var rerun []store.Effect
	if e.Kind == store.EffectTool && !rerunSafe {
		var err error
		if rerun, err = s.rerunGate(ctx, ts, e, gate != nil); err != nil {
			// Refused before admission: the call charges nothing.
			return nil, false, err
		}
	}
	_, charged, err := st.AdmitEffect(ctx, e)
	if err != nil {
		return nil, false, effectError(ts, err)
	}
	ts.noteCharge(charged.Budgets)
	fail := func(err error) ([]byte, bool, error) {
		// A background context: the failure is recorded even when the
		// step's context is what failed.
		if _, merr := st.MarkEffect(context.WithoutCancel(ctx), store.MarkEffect{PrincipalID: ts.principal, TaskID: ts.taskID, Attempt: ts.attempt, Seq: e.Seq, From: store.EffectAdmitted, To: store.EffectFailed}); merr != nil {
			s.r.log.Warn("effect failure not recorded", "task", ts.taskID, "error", merr)
			ts.noteWriteErr(merr)
		}
		return nil, false, err
	}
	if gate != nil {
		id, err := gate(e.Seq, rerun)
		if err != nil {
			return fail(err)
		}
		// Bound to the approval, before the call is dispatched: a crash
		// after this leaves the retry authorized, not asked twice.
		for _, p := range rerun {
			if _, err := s.r.resolveEffect(ctx, ts.principal, p, store.ResolutionRetryAuthorized, id, ""); err != nil && !errors.Is(err, store.ErrConflict) {
				return fail(effectError(ts, err))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if _, err := st.MarkEffect(ctx, store.MarkEffect{PrincipalID: ts.principal, TaskID: ts.taskID, Attempt: ts.attempt, Seq: e.Seq, From: store.EffectAdmitted, To: store.EffectDispatching}); err != nil {
		return fail(effectError(ts, err))
	}
	return s.runEffect(ctx, ts, e, run)
}

// runEffect runs dispatching effect e and records how it ended: observed,
// with its bounded result and its charge, or failed — indeterminate when a
// cancel cut it off, since it may have done part of its work.
func (s *taskServices) runEffect(ctx context.Context, ts *turnState, e store.NewEffect, run runFunc) ([]byte, bool, error) {
	st := s.r.store
	out, charge, err := run(ctx)
	bg := context.WithoutCancel(ctx)
	if err != nil {
		// An effect cut off by a cancel may have done part of its work: it
		// is indeterminate, not failed, and the next attempt is told so.
		to := store.EffectFailed
		if ctx.Err() != nil {
			to = store.EffectIndeterminate
		}
		if _, merr := st.MarkEffect(bg, store.MarkEffect{PrincipalID: ts.principal, TaskID: ts.taskID, Attempt: ts.attempt, Seq: e.Seq, From: store.EffectDispatching, To: to}); merr != nil {
			s.r.log.Warn("effect failure not recorded", "task", ts.taskID, "error", merr)
			ts.noteWriteErr(merr)
		}
		return nil, false, err
	}
	kept := out
	if len(kept) > store.MaxEffectResult {
		// Too large to keep for replay: stored observed without a result,
		// a re-run of the step is told it is observed_unreplayable and may
		// run it again only with an approval.
		kept = nil
	}
	_, t, err := st.ObserveEffect(bg, store.MarkEffect{PrincipalID: ts.principal, TaskID: ts.taskID, Attempt: ts.attempt, Seq: e.Seq, From: store.EffectDispatching, To: store.EffectObserved, Result: kept}, charge)
	if err != nil {
		return nil, false, effectError(ts, err)
	}
	ts.noteCharge(t.Budgets)
	if err := overBudget(ts, t.Budgets); err != nil {
		return nil, false, err
	}
	return out, false, nil
}

// replay answers effect e from an earlier attempt of the step when it ran
// there (replayable), recording the replay; false when e must run.
func (s *taskServices) replay(ctx context.Context, ts *turnState, e store.NewEffect) ([]byte, bool, error) {
	result, ok, err := s.replayable(ctx, ts, e)
	if err != nil {
		return nil, false, effectError(ts, err)
	}
	if !ok {
		return nil, false, nil
	}
	e.Replay, e.Result = true, result
	_, t, err := s.r.store.AdmitEffect(ctx, e)
	if err != nil {
		return nil, false, effectError(ts, err)
	}
	if err := overBudget(ts, t.Budgets); err != nil {
		return nil, false, err
	}
	return result, true, nil
}

// replayable finds what an earlier attempt of the step observed of effect
// e, for this attempt to replay instead of running it again: the effect at
// e's place (seq) with e's fingerprint, as a sequential executor repeats
// its calls in order; else, for a model or tool call, an effect with e's
// fingerprint the earlier attempts ran and observed elsewhere in the step,
// the oldest first — an executor's parallel calls reach the host in
// another order on the re-run. Each earlier run is replayed at most once
// per attempt, so a call made more often than it was observed runs (tool
// calls behind the unsettled-effect gate, as before). Approvals keep to
// their place.
func (s *taskServices) replayable(ctx context.Context, ts *turnState, e store.NewEffect) ([]byte, bool, error) {
	st := s.r.store
	prev, atPlace, err := st.Replayable(ctx, ts.principal, ts.taskID, ts.attempt, e.Seq, e.Fingerprint)
	if err != nil || e.Kind == store.EffectApproval {
		return prev.Result, atPlace && err == nil, err
	}
	ts.replayMu.Lock()
	defer ts.replayMu.Unlock()
	if ts.replays == nil {
		runs, err := st.ReplayCandidates(ctx, ts.principal, ts.taskID, ts.attempt)
		if err != nil {
			return nil, false, err
		}
		ts.replays = make(map[string]*replayPool, len(runs))
		for fp, r := range runs {
			ts.replays[fp] = &replayPool{runs: r, used: make([]bool, len(r))}
		}
	}
	pool, ok := ts.replays[e.Fingerprint]
	if !ok {
		return nil, false, nil
	}
	// The effect at e's place may itself be a replay of an earlier
	// attempt's run: it uses up one of the runs all the same, and answers
	// what it answered then.
	place := store.EffectRef{Attempt: prev.Attempt, Seq: prev.Seq}
	ref, ok := pool.take(place, atPlace && !prev.Replayed)
	switch {
	case !ok:
		return nil, false, nil
	case atPlace && (ref == place || prev.Replayed):
		return prev.Result, true, nil
	}
	run, ok, err := st.ReplayableAt(ctx, ts.principal, ts.taskID, ref)
	return run.Result, ok && err == nil, err
}

// CallModel admits and runs one model call. Its depth comes from the parent
// call token, never from the executor.
func (s *taskServices) CallModel(ctx context.Context, call plugin.ModelCall) (plugin.ModelAnswer, error) {
	ts, err := s.authorizeState("CallModel", call.TurnToken)
	if err != nil {
		return plugin.ModelAnswer{}, err
	}
	if s.r.svc.Model == nil {
		return plugin.ModelAnswer{}, plugin.Refuse(plugin.ErrNotConfigured, "no model provider is configured")
	}
	depth, ok := ts.depthOf(call.ParentCallToken)
	if !ok {
		return plugin.ModelAnswer{}, plugin.Refuse(plugin.ErrNotAllowed, "parent call token is not a model call of this step")
	}
	mreq, err := modelRequest(call)
	if err != nil {
		return plugin.ModelAnswer{}, err
	}
	mreq.TaskID, mreq.Depth = ts.taskID, int(depth)
	mreq.Options = ts.opts.Model
	// A tool the task may not use is not offered: the model could not
	// call it anyway (CallTool refuses it).
	mreq.Tools = slices.DeleteFunc(slices.Clone(mreq.Tools), func(t model.ToolSpec) bool { return !ts.opts.allows(t.Name) })
	mreq.Progress = func(p model.Progress) { s.modelProgress(ts, p) }
	canon, _ := json.Marshal(mreq.Messages)
	toolsJSON, _ := json.Marshal(mreq.Tools)
	// The prompt is known before the call: one that would not fit what is
	// left of the token budget is refused before it is sent.
	promptTokens := estimateTokens(promptBytes(mreq))
	e := store.NewEffect{Kind: store.EffectModel, Depth: depth, Tokens: promptTokens,
		Fingerprint: fingerprint([]byte("model"), canon, toolsJSON),
		Summary:     fmt.Sprintf("model{messages:%d,tools:%d,depth:%d}", len(mreq.Messages), len(mreq.Tools), depth)}
	out, replayed, err := s.ledgered(ctx, ts, e, nil, true, replayEarlier, func(ctx context.Context) ([]byte, store.Charge, error) {
		resp, err := s.r.svc.Model.Complete(ctx, s.fitReply(ts, mreq, promptTokens))
		if err != nil {
			if ctx.Err() != nil {
				return nil, store.Charge{}, ctx.Err()
			}
			return nil, store.Charge{}, s.modelError(ts, err)
		}
		ts.addUsage(resp.Usage)
		ts.noteRefusal("", "")
		s.r.set.Observer.ModelCalled(resp.Usage.PromptTokens, resp.Usage.CompletionTokens, resp.Usage.Duration)
		s.r.log.Info("model call", "task", ts.taskID, "attempt", ts.attempt, "depth", depth,
			"prompt_tokens", resp.Usage.PromptTokens, "completion_tokens", resp.Usage.CompletionTokens,
			"duration_ms", resp.Usage.Duration.Milliseconds(), "finish", resp.FinishReason, "tool_calls", len(resp.Message.ToolCalls))
		out, err := json.Marshal(modelResult{Message: resp.Message, FinishReason: resp.FinishReason, Usage: resp.Usage})
		return out, modelCharge(promptTokens, resp), err
	})
	if err != nil {
		return plugin.ModelAnswer{}, err
	}
	var res modelResult
	if err := json.Unmarshal(out, &res); err != nil {
		return plugin.ModelAnswer{}, fmt.Errorf("model result not readable: %w", err)
	}
	return plugin.ModelAnswer{Message: res.Message, CallToken: ts.addCall(depth), Depth: depth, Replayed: replayed,
		FinishReason: res.FinishReason, Usage: res.Usage}, nil
}

// fitReply lowers a model call's max_tokens to what the task's token
// budget has left once its prompt is counted, as the budgets read at its
// admission: the reply is cut there (finish "length") rather than charged
// past the budget and withheld. Calls of the step in flight beside it may
// still take the budget past; the charge at observe then fails the task.
func (s *taskServices) fitReply(ts *turnState, mreq model.Request, promptTokens int64) model.Request {
	b, ok := ts.chargedBudgets()
	if !ok || b.ModelTokens.Limit <= 0 {
		return mreq
	}
	left := b.ModelTokens.Limit - b.ModelTokens.Used - promptTokens
	want := int64(cmp.Or(mreq.Options.MaxTokens, s.r.set.Model.MaxTokens))
	if left < 1 || (want > 0 && want <= left) {
		return mreq
	}
	mreq.Options.MaxTokens = int(left)
	return mreq
}

// modelResult is what the ledger keeps of an observed model call for a
// re-run to replay. Message's fields are inlined, so a result written
// before FinishReason and Usage existed reads as well.
type modelResult struct {
	model.Message
	FinishReason string      `json:",omitempty"`
	Usage        model.Usage `json:",omitzero"`
}

// progressDue reports whether a streamed call that has waited elapsed is
// due a progress event at now, the last one having been at last.
func progressDue(last, now time.Time, elapsed time.Duration) bool {
	return last.IsZero() || now.Sub(last) >= max(time.Second, elapsed/10)
}

// modelProgress records a streamed model call's progress as a
// step.progress event: every second at first, then ever more rarely (at
// most ten events a tenfold of waiting), so a call of many minutes does
// not push the task's other events out of its retention.
func (s *taskServices) modelProgress(ts *turnState, p model.Progress) {
	ts.mu.Lock()
	now := time.Now()
	due := progressDue(ts.lastProgress, now, p.Elapsed)
	if due {
		ts.lastProgress = now
	}
	ts.mu.Unlock()
	if !due {
		return
	}
	note := fmt.Sprintf("model call: %d chunks in %ds", p.Chunks, int64(p.Elapsed.Seconds()))
	if err := s.r.progress(ts.ctx, ts.turn, note); err != nil {
		s.r.log.Debug("model progress not recorded", "task", ts.taskID, "error", err)
	}
}

// CallTool admits and runs one tool call under its policy; a tool that needs
// approval waits for it with the task in waiting_approval.
func (s *taskServices) CallTool(ctx context.Context, call plugin.ToolCall) (plugin.ToolAnswer, error) {
	ts, err := s.authorizeState("CallTool", call.TurnToken)
	if err != nil {
		return plugin.ToolAnswer{}, err
	}
	reg := s.r.svc.Tools
	if reg == nil {
		return plugin.ToolAnswer{}, plugin.Refuse(plugin.ErrNotConfigured, "no tools are configured")
	}
	name, args, err := toolArgs(call)
	if err != nil {
		return plugin.ToolAnswer{}, err
	}
	pol, ok := reg.Policy(name)
	if !ok || !pol.Enabled {
		return plugin.ToolAnswer{}, plugin.Refuse(plugin.ErrUnknownTool, "tool %q is unknown or disabled", text.Truncate(name, 64))
	}
	if !ts.opts.allows(name) {
		return plugin.ToolAnswer{}, plugin.Refuse(plugin.ErrUnknownTool, "tool %q is not one of this task's tools (spec.tools)", text.Truncate(name, 64))
	}
	e := store.NewEffect{Kind: store.EffectTool, Fingerprint: tools.Fingerprint(name, args),
		IdempotencyKey: text.Truncate(call.IdempotencyKey, 128), Summary: tools.Summarize(name, args)}
	env := tools.Env{TaskID: ts.taskID, Workspace: s.r.workspace(ts.taskID)}
	if call.Idempotent {
		key := call.IdempotencyKey
		switch {
		case !reg.HonoursKey(name):
			return plugin.ToolAnswer{}, &plugin.FieldError{Field: "idempotent", Message: fmt.Sprintf("tool %q does not honour an idempotency key (workspace.write does): call it without idempotent; after a crash its retry needs an approval", text.Truncate(name, 64))}
		case key == "":
			return plugin.ToolAnswer{}, &plugin.FieldError{Field: "idempotency_key", Message: "an idempotent call needs the key its tool de-duplicates by"}
		case len(key) > tools.MaxIdempotencyKeyBytes:
			return plugin.ToolAnswer{}, &plugin.FieldError{Field: "idempotency_key", Message: fmt.Sprintf("%d bytes, limit %d", len(key), tools.MaxIdempotencyKeyBytes)}
		}
		e.IdempotencyKey, e.Summary, env.IdempotencyKey = key, e.Summary+idempotentMark, key
	}
	gate, err := s.toolGate(ctx, ts, reg, env, e.Fingerprint, name, args, pol.NeedsApproval)
	if err != nil {
		return plugin.ToolAnswer{}, err
	}
	out, replayed, err := s.ledgered(ctx, ts, e, gate, rerunSafe(name, args), toolReplay(name), s.runTool(ts, reg, env, name, args))
	if err != nil {
		return plugin.ToolAnswer{}, err
	}
	var res tools.Result
	if err := json.Unmarshal(out, &res); err != nil {
		return plugin.ToolAnswer{}, fmt.Errorf("tool result not readable: %w", err)
	}
	return plugin.ToolAnswer{Output: res.Output, IsError: res.IsError, Replayed: replayed}, nil
}

// toolArgs are a tool call's name and arguments, "{}" for none, within the
// largest bound any tool allows and valid JSON.
func toolArgs(call plugin.ToolCall) (string, []byte, error) {
	args := call.Arguments
	if len(args) == 0 {
		args = []byte("{}")
	}
	// Each tool bounds its own arguments; this is the largest any allows.
	if len(args) > tools.MaxWriteArgsBytes {
		return "", nil, &plugin.FieldError{Field: "arguments_json", Message: fmt.Sprintf("tool arguments are %d bytes, limit %d", len(args), tools.MaxWriteArgsBytes)}
	}
	if !json.Valid(args) {
		return "", nil, &plugin.FieldError{Field: "arguments_json", Message: "tool arguments are not valid JSON"}
	}
	return call.Name, args, nil
}

// toolGate is the approval a call of tool name needs before it runs (nil
// when its policy needs none): covered by an allow-for-task grant unless it
// retries a call that may already have run, else asked, showing a
// workspace.write as its diff.
func (s *taskServices) toolGate(ctx context.Context, ts *turnState, reg *tools.Registry, env tools.Env, fp, name string, args []byte, needed bool) (gateFunc, error) {
	if !needed {
		return nil, nil
	}
	// The approver sees what would run, all of it; the approval record is
	// the owner's, unlike the ledger and events, which keep no argument
	// values. A command too long to show is refused before it is
	// admitted: it costs no budget.
	desc, n, whole := tools.DescribeForApproval(name, args)
	if !whole {
		return nil, &plugin.FieldError{Field: "arguments_json.command", Message: fmt.Sprintf(
			"the command shows as %d bytes and an approval shows at most %d: an approver must see the whole command; write it to a script with workspace.write and run `sh SCRIPT`",
			n, tools.MaxApprovalCommandBytes)}
	}
	return func(seq int64, rerun []store.Effect) (string, error) {
		if len(rerun) == 0 {
			// An allow-for-task approval may cover it; never the retry of
			// a call that may already have run.
			if id, ok, err := s.coveredByGrant(ctx, ts, name, desc, fp); err != nil || ok {
				return id, err
			}
		}
		shown := desc
		d, isDiff := writeDiff{}, false
		if name == tools.ToolWorkspaceWrite {
			// Approve a diff: the approver sees the change to the file,
			// and the write is refused if the file changed after they
			// saw it.
			if d, isDiff = diffForApproval(ctx, reg, env, args); isDiff {
				shown = d.prompt
			}
		}
		id, err := s.r.awaitApproval(ctx, ts, seq, name, rerunPrompt(shown, rerun), binding{fingerprint: fp, subject: desc})
		if err == nil && isDiff {
			err = checkBase(ctx, reg, env, d)
		}
		return id, err
	}, nil
}

// runTool runs a call of tool name: the host's own task tools here, every
// other in the registry.
func (s *taskServices) runTool(ts *turnState, reg *tools.Registry, env tools.Env, name string, args []byte) runFunc {
	return func(ctx context.Context) ([]byte, store.Charge, error) {
		if tools.IsTaskTool(name) {
			// The host owns the tasks: its task tools are served here.
			res, err := s.r.taskTool(ctx, ts.turn, name, args)
			if err != nil {
				return nil, store.Charge{}, &plugin.ToolError{Err: err}
			}
			out, err := json.Marshal(res)
			return out, store.Charge{OutputBytes: int64(len(out))}, err
		}
		res, err := reg.Call(ctx, env, name, args)
		if err != nil {
			var ae *tools.ArgError
			switch {
			case ctx.Err() != nil:
				return nil, store.Charge{}, ctx.Err()
			case errors.As(err, &ae):
				return nil, store.Charge{}, err
			}
			return nil, store.Charge{}, &plugin.ToolError{Err: err}
		}
		out, err := json.Marshal(res)
		return out, store.Charge{OutputBytes: int64(len(res.Output))}, err
	}
}

// RequestApproval asks the task's principal to decide; the task waits in
// waiting_approval meanwhile. A rejection or an expiry fails the task, so an
// answer reaching the executor is always "approved".
func (s *taskServices) RequestApproval(ctx context.Context, tok, prompt string) error {
	ts, err := s.authorizeState("RequestApproval", tok)
	if err != nil {
		return err
	}
	// An executor's prompt is shown on terminals: no control characters.
	// Escaping can grow it; the store takes 2000 bytes.
	prompt = tools.Printable(text.TruncateRunes(prompt, 500), 1900)
	listed := ts.unsettled()
	if n := len(listed); n > 0 {
		// Whatever the executor wrote, the approver learns what a yes
		// re-admits: the host's word, within the store's 2000 bytes.
		prompt += fmt.Sprintf(" [taskhost: approving lets %d interrupted tool call(s) of this task run again]", n)
	}
	e := store.NewEffect{Kind: store.EffectApproval, Fingerprint: fingerprint([]byte("approval"), []byte(prompt)), Summary: "approval"}
	var id string
	gate := func(seq int64, _ []store.Effect) (got string, err error) {
		id, err = s.r.awaitApproval(ctx, ts, seq, "", prompt, binding{})
		return id, err
	}
	if _, _, err := s.ledgered(ctx, ts, e, gate, true, replayEarlier, func(context.Context) ([]byte, store.Charge, error) {
		return []byte(`"approved"`), store.Charge{}, nil
	}); err != nil {
		return err
	}
	if id == "" {
		// Replayed: the attempt that was granted it authorized the
		// retries then, unless it died between the two writes; the gate
		// then refuses them again and the executor asks anew.
		return nil
	}
	// A person said yes to the retry of what the prompt counted: bound to
	// this approval, durably, before any of them is called again.
	for _, l := range listed {
		prev := store.Effect{TaskID: ts.taskID, Attempt: l.Attempt, Seq: l.Seq}
		if _, err := s.r.resolveEffect(ctx, ts.principal, prev, store.ResolutionRetryAuthorized, id, ""); err != nil && !errors.Is(err, store.ErrConflict) {
			return effectError(ts, err)
		}
	}
	return nil
}

// RequestInput asks the task's principal a question, with the task in
// waiting_approval, and answers the JSON value they approve it with
// (`taskhost approve ID --value JSON`). Like any approval effect it is
// replayed in a re-run of the step once answered, so a question is never
// answered twice; one whose wait a crash cut off is asked again.
func (s *taskServices) RequestInput(ctx context.Context, tok, question string) ([]byte, error) {
	ts, err := s.authorizeState("RequestInput", tok)
	if err != nil {
		return nil, err
	}
	question = tools.Printable(text.TruncateRunes(question, 500), 1900)
	if question == "" {
		return nil, &plugin.FieldError{Field: "question", Message: "an input request needs a question"}
	}
	e := store.NewEffect{Kind: store.EffectApproval, Fingerprint: fingerprint([]byte("input"), []byte(question)), Summary: "input"}
	var answer []byte
	gate := func(seq int64, _ []store.Effect) (id string, err error) {
		id, answer, err = s.r.awaitAnswer(ctx, ts, seq, inputTool, question, binding{})
		return id, err
	}
	out, _, err := s.ledgered(ctx, ts, e, gate, true, replayEarlier, func(context.Context) ([]byte, store.Charge, error) {
		return answer, store.Charge{}, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// modelRequest bounds an executor's model call: it is as much of the
// conversation as the executor sends, never the host's limits' worth.
func modelRequest(c plugin.ModelCall) (model.Request, error) {
	if n := len(c.Messages); n == 0 || n > maxModelMessages {
		return model.Request{}, &plugin.FieldError{Field: "messages", Message: fmt.Sprintf("a model request needs 1..%d messages, got %d", maxModelMessages, n)}
	}
	size := 0
	for _, m := range c.Messages {
		size += len(m.Content)
		for _, tc := range m.ToolCalls {
			size += len(tc.Arguments)
		}
	}
	if size > maxMessageBytes {
		return model.Request{}, &plugin.FieldError{Field: "messages", Message: fmt.Sprintf("model request messages are %d bytes, limit %d", size, maxMessageBytes)}
	}
	return model.Request{Messages: c.Messages, Tools: c.Tools}, nil
}
