package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// Causes a run's context is cancelled with; the step loop branches on them.
var (
	errUserCancelled = errors.New("task cancelled by its principal")
	errPaused        = errors.New("task paused by its principal")
	errShutdown      = errors.New("host shutting down")
	errWallExceeded  = errors.New("wall-clock budget exhausted")
)

// run is one run of one task: from start or resume until the task leaves
// running, in one goroutine that owns one executor process.
type run struct {
	r *Runner
	// id, principal and runID never change; the heartbeat and Cancel read
	// them from other goroutines.
	id, principal string
	runID         int64
	task          store.Task // as of the last change this run made; the run's goroutine only
	ctx           context.Context
	cancel        context.CancelCauseFunc
	done          chan struct{}
	wall          *wallClock
	// stopBeat stops the heartbeat; the run goroutine only.
	stopBeat func()

	exe    plugin.Executor
	desc   plugin.Description
	cp     *plugin.Checkpoint // the last committed checkpoint, verified
	recent []plugin.Summary   // the last completed step summaries, oldest first
	// indeterminate are effects left dispatching by a dead attempt of the
	// step about to run; cleared once an attempt completes.
	indeterminate []plugin.Effect
	// rereadEffects: indeterminate is to be read again before the next
	// step (an attempt ended since first read it).
	rereadEffects bool
	// quiet: the attempt being finished was told of no unresolved effect
	// and recorded none, so the task's set of them is still empty and the
	// next step need not read it again.
	quiet bool
	// delegated: a step of this run delegated a child (task.delegate), so
	// the task may have to wait for it; children are what its steps are
	// told of its children, read at the run's first step and after a step
	// that delegated.
	delegated    atomic.Bool
	children     []plugin.ChildTask
	childrenRead bool
	// ws is the task's stored workspace as this run knows it
	// (workspace.go), read at the run's start.
	ws *workspaceSync
}

func (ru *run) log(msg string, args ...any) {
	ru.r.log.Info(msg, append([]any{"task", ru.id, "run", ru.runID}, args...)...)
}

// loop runs steps until the task leaves running.
func (ru *run) loop() {
	defer ru.r.finished(ru)
	defer ru.cancel(nil)
	ru.stopBeat = ru.heartbeat()
	// The heartbeat ends with the last step, before the plugin is stopped:
	// a plugin slow to stop must not keep charging (or logging) wall time.
	defer func() {
		ru.stopBeat()
		if ru.exe != nil {
			ru.exe.Stop()
		}
	}()

	exe, err := ru.r.launcher.Launch(plugin.WithLaunchLabels(ru.ctx, ru.id, ru.runID), ru.task.Executor, &taskServices{r: ru.r, taskID: ru.task.ID})
	if err != nil {
		ru.log("executor unavailable", "error", err)
		ru.endRun(store.StatusInterrupted, store.ReasonExecutorUnavailable, err.Error())
		return
	}
	ru.exe = exe
	ru.r.set.Observer.PluginStarted(ru.task.Executor)
	if ru.desc, err = plugin.DescribeChecked(ru.ctx, ru.task.Executor, exe); err != nil {
		ru.endRun(store.StatusInterrupted, store.ReasonExecutorUnavailable, err.Error())
		return
	}
	att, ok := ru.first()
	for ok {
		att, ok = ru.step(att)
	}
}

// heartbeat persists active time at least every Settings.Heartbeat so a host
// crash loses at most one interval, which start-up recovery then charges.
func (ru *run) heartbeat() (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(finished)
		t := time.NewTicker(ru.r.set.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				err := ru.r.store.Heartbeat(context.Background(), ru.principal, ru.id, ru.runID, ru.wall.used())
				if errors.Is(err, store.ErrFenced) {
					ru.r.log.Error("run stopped: its lease was lost to a newer run", "task", ru.id, "run", ru.runID, "error", err)
					ru.cancel(errFenced)
				} else if err != nil {
					ru.r.log.Warn("heartbeat not persisted", "task", ru.id, "error", err)
				}
			case <-quit:
				return
			}
		}
	}()
	return func() { once.Do(func() { close(quit); <-finished }) }
}

// endRun records the end of the run outside any attempt, when the task is
// still running: to is interrupted or failed.
func (ru *run) endRun(to store.Status, reason store.Reason, msg string) {
	err := ru.retryWrite(func() error { return ru.recordEnd(to, reason, msg) })
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		ru.storeFailed(nil, err)
	}
}

// recordEnd is endRun's one write. A conflict means the task left running
// first (a cancel): nothing more is ours to record.
func (ru *run) recordEnd(to store.Status, reason store.Reason, msg string) error {
	ev := EventTaskInterrupted
	if to == store.StatusFailed {
		ev = EventTaskFailed
	}
	ctx := context.Background()
	// One reading for the store and the event, so the event shows what
	// was stored.
	wall := ru.wall.used()
	if err := ru.r.store.Heartbeat(ctx, ru.task.PrincipalID, ru.task.ID, ru.task.RunID, wall); err != nil {
		ru.r.log.Warn("wall time not persisted", "task", ru.task.ID, "error", err)
	}
	next := ru.task
	next.Status = to
	next.Budgets.WallMillis.Used = max(next.Budgets.WallMillis.Used, wall)
	// Fenced by the run id: a run that lost its lease must not end the
	// run that took the task over.
	t, err := ru.r.store.EndRun(ctx, store.EndRun{
		PrincipalID: ru.task.PrincipalID, TaskID: ru.task.ID, RunID: ru.task.RunID,
		To: to, Reason: reason, Message: text.Truncate(msg, 2000),
		Events: []store.NewEvent{newEvent(ev, next, EventPayload{Reason: string(reason)})},
	})
	ru.r.notify()
	if err != nil {
		ru.log("run end not recorded", "to", to, "error", err)
		return err
	}
	ru.task = t
	return nil
}

// first loads what a run needs from the store and claims its first
// attempt. Later attempts are claimed in the transaction that records the
// previous one's outcome (finish). The task is running in the store from
// the moment the run starts, so every way out of first either hands back a
// claimed attempt or leaves the task in a state that is not running on this
// run: a store that keeps failing ends the run through storeFailed, which
// records the interruption once the store answers.
func (ru *run) first() (store.Attempt, bool) {
	r := ru.r
	var recent []store.Attempt
	var effs []store.Effect
	var ws *workspaceSync
	err := ru.retryWrite(func() error {
		t, err := r.store.GetTask(ru.ctx, ru.principal, ru.id)
		if err != nil {
			return err
		}
		ru.task = t
		if t.Status != store.StatusRunning || t.RunID != ru.runID {
			return nil
		}
		if recent, err = r.store.RecentSummaries(ru.ctx, t.PrincipalID, t.ID, r.set.RecentSummaries); err != nil {
			return err
		}
		if effs, err = r.store.IndeterminateEffects(ru.ctx, t.PrincipalID, t.ID); err != nil {
			return err
		}
		ws, err = r.loadWorkspace(ru.ctx, t.PrincipalID, t.ID)
		return err
	})
	switch {
	case err != nil && !ru.stillOurs(err):
		if c := context.Cause(ru.ctx); c != nil {
			ru.endForCause(c)
		}
		return store.Attempt{}, false
	case err != nil:
		ru.log("task not readable", "error", err)
		ru.storeFailed(nil, err)
		return store.Attempt{}, false
	case ru.task.Status != store.StatusRunning || ru.task.RunID != ru.runID:
		return store.Attempt{}, false
	}
	for _, a := range recent {
		ru.recent = append(ru.recent, plugin.Summary{Step: a.Number, Text: a.Summary})
	}
	for _, e := range effs {
		ru.indeterminate = append(ru.indeterminate, effectView(e))
	}
	if !ru.prepareWorkspace(ws) {
		return store.Attempt{}, false
	}
	// The checkpoint is verified before a step is charged for it.
	if ru.cp, err = ru.loadCheckpoint(); err != nil {
		ru.endRun(store.StatusFailed, store.ReasonCheckpointIncompatible, err.Error())
		return store.Attempt{}, false
	}
	att, err := ru.claimFirst()
	r.notify()
	var be *store.BudgetError
	switch {
	case errors.As(err, &be):
		ru.endRun(store.StatusFailed, be.Budget.Reason(), be.Error())
		return store.Attempt{}, false
	case err != nil:
		if c := context.Cause(ru.ctx); c != nil {
			ru.endForCause(c)
		} else if ru.stillOurs(err) {
			ru.storeFailed(nil, err)
		} else {
			ru.log("attempt not claimed", "error", err)
		}
		return store.Attempt{}, false
	}
	return att, true
}

// stillOurs reports whether a run whose write or read failed with err may
// still hold its task: anything but the task leaving running (a conflict,
// a fence) or going away.
func (ru *run) stillOurs(err error) bool {
	return !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) && ru.ctx.Err() == nil
}

// claimFirst claims the run's first attempt, retrying while the store is
// unavailable. Every try names the run's own task: a failed try returns no
// task to claim with. A try that failed unavailable may still have
// committed (its acknowledgement lost with the connection): the next try
// then finds the attempt running, and adopts it when it is this run's.
func (ru *run) claimFirst() (store.Attempt, error) {
	r := ru.r
	var att store.Attempt
	uncertain := false
	err := ru.retryWrite(func() error {
		a, t, err := r.store.ClaimAttempt(ru.ctx, ru.principal, ru.id, ru.runID, ru.startedEvent(ru.task))
		switch {
		case err == nil:
			att, ru.task = a, t
		case errors.Is(err, store.ErrUnavailable):
			uncertain = true
		case uncertain && errors.Is(err, store.ErrConflict):
			if a, t, ok := ru.adopt(); ok {
				att, ru.task = a, t
				return nil
			}
		}
		return err
	})
	return att, err
}

// adopt finds the attempt an unacknowledged claim of this run committed:
// the task is still running in this run and its last attempt is running
// under this run's id.
func (ru *run) adopt() (store.Attempt, store.Task, bool) {
	ctx := ru.ctx
	t, err := ru.r.store.GetTask(ctx, ru.principal, ru.id)
	if err != nil || t.Status != store.StatusRunning || t.RunID != ru.runID {
		return store.Attempt{}, store.Task{}, false
	}
	as, err := ru.r.store.ListAttempts(ctx, ru.principal, ru.id)
	if err != nil || len(as) == 0 {
		return store.Attempt{}, store.Task{}, false
	}
	last := as[len(as)-1]
	if last.Status != store.AttemptRunning || last.RunID != ru.runID {
		return store.Attempt{}, store.Task{}, false
	}
	ru.log("claim acknowledged late: the attempt it committed is this run's", "attempt", last.Number)
	return last, t, true
}

// startedEvent is the step.started event of the attempt claimed next. Every
// attempt charges one step, so its number is the step count after the
// charge.
func (ru *run) startedEvent(t store.Task) store.NewEvent {
	next := t
	next.Budgets.Steps.Used++
	return newEvent(EventStepStarted, next, EventPayload{Attempt: next.Budgets.Steps.Used})
}

// step runs claimed attempt att and returns the next claimed attempt, or
// false when the run is over.
func (ru *run) step(att store.Attempt) (store.Attempt, bool) {
	r := ru.r
	if cause := context.Cause(ru.ctx); cause != nil {
		return ru.finish(causeVerdict(cause), att)
	}
	if ru.wall.remaining() <= 0 {
		return ru.finish(verdict{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonWallClockExceeded, message: "the task used all of its wall-clock budget"}, att)
	}
	if k, over := ru.task.Budgets.Over(); over {
		// A call took the task past a budget and the run ended before its
		// step did (a crash): the resumed task fails, it does not start
		// afresh.
		return ru.finish(verdict{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: k.Reason(),
			message: fmt.Sprintf("the task is past its %s budget", k)}, att)
	}
	if ru.rereadEffects {
		var effs []store.Effect
		err := ru.retryWrite(func() (err error) {
			effs, err = r.store.IndeterminateEffects(ru.ctx, ru.task.PrincipalID, ru.task.ID)
			return err
		})
		if cause := context.Cause(ru.ctx); err != nil && cause != nil {
			// A cancel or a shutdown came while reading: the attempt ends
			// for that, not for the store.
			return ru.finish(causeVerdict(cause), att)
		}
		if err != nil {
			ru.storeFailed(&att, err)
			return store.Attempt{}, false
		}
		ru.rereadEffects = false
		for _, e := range effs {
			ru.indeterminate = append(ru.indeterminate, effectView(e))
		}
	}
	req := ru.request(att)
	if !ru.childrenRead || ru.delegated.Load() {
		ru.children, ru.childrenRead = ru.childResults(ru.ctx), true
	}
	req.Children = ru.children
	// Not a deadline: waiting for an approval moves the moment the budget
	// runs out, and a gRPC deadline would carry the first one to the
	// executor.
	stepCtx, cancelStep := context.WithCancelCause(ru.ctx)
	tok, ts := r.turns.issue(stepCtx, turn{taskID: ru.task.ID, principal: ru.task.PrincipalID, runID: ru.task.RunID, attempt: att.Number}, r.set.MaxParallelModelCalls)
	req.TurnToken = tok
	ts.opts = ru.taskOptions()
	req.ModelPromptTokens = r.set.Model.promptTokens(cmp.Or(ts.opts.Model.MaxTokens, r.set.Model.MaxTokens))
	ts.setUnsettled(ru.indeterminate)
	go ru.wall.expire(stepCtx, cancelStep, errWallExceeded)
	began := time.Now()
	res, stepErr := ru.exe.Step(stepCtx, req)
	cause := context.Cause(stepCtx)
	cancelStep(nil)
	r.turns.revoke(tok)
	ts.end()
	if b, ok := ts.chargedBudgets(); ok {
		ru.task.Budgets.ToolCalls, ru.task.Budgets.ModelCalls, ru.task.Budgets.Depth = b.ToolCalls, b.ModelCalls, b.Depth
		ru.task.Budgets.ModelTokens, ru.task.Budgets.OutputBytes, ru.task.Budgets.TokensEstimated = b.ModelTokens, b.OutputBytes, b.TokensEstimated
	}

	v := ru.amend(ru.classify(res, stepErr, cause), ts, att)
	v.usage, v.calls = ts.stepUsage()
	r.set.Observer.StepFinished(ru.task.Executor, string(v.attempt), time.Since(began))
	ru.quiet = len(ru.indeterminate) == 0 && ts.effectless()
	return ru.finish(v, att)
}

// amend is verdict v of attempt att as the step's effects (ts) revise it:
// a spent budget, a model outage or refusal the executor gave up on, a
// failed ledger write, or children still live.
func (ru *run) amend(v verdict, ts *turnState, att store.Attempt) verdict {
	r := ru.r
	if reason, msg := ts.exhaustedReason(); reason != "" && (v.attempt == store.AttemptCompleted || v.outcome == plugin.OutcomeFail) {
		// An effect was refused for a spent budget: whatever the executor
		// made of it, the task fails with that budget's reason.
		v = verdict{attempt: store.AttemptFailed, outcome: v.outcome, taskTo: store.StatusFailed, reason: reason,
			message: text.Truncate("an effect was refused: "+string(reason)+": "+msg, 2000)}
	}
	if msg := ts.modelOutage(); msg != "" && v.outcome == plugin.OutcomeFail && v.reason == store.ReasonExecutorFailed {
		// The executor gave up after the model provider failed it: the
		// outage, not the executor, ended the step.
		v = modelVerdict("the model provider is unavailable (" + msg + "); the executor gave up: " + v.message)
		r.log.Warn("step ended on a model outage: the task is interrupted (model_unavailable)", "task", ru.id, "attempt", att.Number, "cause", msg)
	}
	if reason, msg := ts.modelRefusal(); reason != "" && v.outcome == plugin.OutcomeFail && v.reason == store.ReasonExecutorFailed {
		// The executor gave up on a model call the endpoint refused for
		// its reply or its length: said by the reason, for every executor.
		v = ru.classify(plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: string(reason), Message: text.Truncate(msg+"; the executor gave up: "+v.message, 2000)}, nil, nil)
	}
	if msg := ts.modelAuthRefused(); msg != "" && v.outcome == plugin.OutcomeFail && v.reason == store.ReasonExecutorFailed {
		// The provider's own words, once: the executor's message wraps the
		// same error again on its way back.
		v = verdict{attempt: store.AttemptFailed, outcome: plugin.OutcomeFail, taskTo: store.StatusFailed, reason: store.ReasonModelAuth,
			message: text.Truncate("model auth: "+msg+"; check the key named by [model] api_key_env", 2000)}
		r.log.Warn("step ended on a model credentials refusal: the task fails (model_auth)", "task", ru.id, "attempt", att.Number)
	}
	if err := ts.storeError(); err != nil && !v.abandoned && v.attempt != store.AttemptCancelled {
		// An effect's write failed: whatever the executor made of the
		// error it got, the ledger of this attempt is incomplete, so the
		// attempt is interrupted and its effects settled like a crash's.
		v = storeVerdict(err)
	}
	if v.attempt == store.AttemptCompleted && v.taskTo == "" && ru.delegated.Load() {
		// A step that ends with a child still live ends the run: the task
		// waits, blocked, without a slot, until its children have ended.
		live, err := r.hasLiveChildren(context.WithoutCancel(ru.ctx), ru.principal, ru.id)
		if err != nil {
			r.log.Warn("children not read; the task goes on and waits at its next step", "task", ru.id, "error", err)
		} else if live {
			v.taskTo, v.reason = store.StatusBlocked, store.ReasonWaitingChildren
		}
	}
	return v
}

// endForCause ends the run, between attempts, for the reason its context
// was cancelled.
func (ru *run) endForCause(cause error) {
	switch {
	case errors.Is(cause, errUserCancelled), errors.Is(cause, errPaused), errors.Is(cause, errApprovalRejected), errors.Is(cause, errApprovalExpired),
		errors.Is(cause, errChildFailed):
		// The task's end was committed before the context was cancelled.
	case errors.Is(cause, errFenced):
		// Another run holds the task: nothing here is ours to record.
	case errors.Is(cause, errShutdown):
		ru.endRun(store.StatusInterrupted, store.ReasonHostShutdown, "the host was stopped")
	default:
		ru.endRun(store.StatusInterrupted, store.ReasonHostShutdown, cause.Error())
	}
}

// loadCheckpoint opens and checks the task's stored checkpoint, if any.
func (ru *run) loadCheckpoint() (*plugin.Checkpoint, error) {
	cp, err := ru.r.seal.openStored(ru.task)
	if cp == nil || err != nil {
		return nil, err
	}
	if !ru.desc.Accepts(cp.Schema) {
		return nil, fmt.Errorf("%w: executor %s %s does not accept checkpoint schema %q (it accepts %v)",
			ErrCheckpointIncompatible, ru.desc.Kind, ru.desc.Version, cp.Schema, ru.desc.CheckpointSchemas)
	}
	return cp, nil
}

// request builds what the executor may see of the task (DESIGN §4).
func (ru *run) request(att store.Attempt) plugin.StepRequest {
	t := ru.task
	return plugin.StepRequest{
		TaskID: t.ID, RunID: t.RunID, Attempt: att.Number, Spec: t.Spec, Checkpoint: ru.cp,
		Recent:        append([]plugin.Summary(nil), ru.recent...),
		Indeterminate: ru.indeterminate,
		SummaryChars:  ru.r.set.SummaryChars,
		Remaining: plugin.Budgets{
			Steps: t.Budgets.Steps.Remaining(), ToolCalls: t.Budgets.ToolCalls.Remaining(),
			ModelCalls: t.Budgets.ModelCalls.Remaining(), Depth: t.Budgets.Depth.Remaining(),
			WallSeconds: int64(ru.wall.remaining().Seconds()),
			ModelTokens: t.Budgets.ModelTokens.Remaining(), OutputBytes: t.Budgets.OutputBytes.Remaining(),
		},
		Limits: plugin.Budgets{
			Steps: t.Budgets.Steps.Limit, ToolCalls: t.Budgets.ToolCalls.Limit,
			ModelCalls: t.Budgets.ModelCalls.Limit, Depth: t.Budgets.Depth.Limit,
			WallSeconds: t.Budgets.WallMillis.Limit / 1000,
			ModelTokens: t.Budgets.ModelTokens.Limit, OutputBytes: t.Budgets.OutputBytes.Limit,
		},
	}
}
