package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// verdict is what one step attempt came to, decided in one place (classify)
// and recorded in one transaction (finish).
type verdict struct {
	// usage is what the step's model calls cost; calls counts them.
	usage      model.Usage
	calls      int64
	attempt    store.AttemptStatus
	outcome    plugin.Outcome
	summary    string
	checkpoint *plugin.Checkpoint // nil keeps the stored checkpoint
	result     []byte
	taskTo     store.Status // "" keeps the task running
	reason     store.Reason
	message    string
	crashed    bool
	limit      string // a crash's cgroup limit (cgroups.LimitMemory, ...), "" none
	abandoned  bool   // the task already left running: only close the attempt
	fenced     bool   // the run lost its lease: write nothing at all
	exit       plugin.ExitStatus
	stderr     string
}

// executorReasons are the reason codes an executor may fail a task with.
// Any other code it sends is recorded as executor_failed.
var executorReasons = map[string]store.Reason{
	string(store.ReasonExecutorFailed):         store.ReasonExecutorFailed,
	string(store.ReasonNoProgress):             store.ReasonNoProgress,
	string(store.ReasonCheckpointIncompatible): store.ReasonCheckpointIncompatible,
	string(store.ReasonEffectIndeterminate):    store.ReasonEffectIndeterminate,
	string(store.ReasonApprovalRejected):       store.ReasonApprovalRejected,
	string(store.ReasonCheckpointTooLarge):     store.ReasonCheckpointTooLarge,
	string(store.ReasonResultTooLarge):         store.ReasonResultTooLarge,
	string(store.ReasonModelUnavailable):       store.ReasonModelUnavailable,
	string(store.ReasonModelAuth):              store.ReasonModelAuth,
	string(store.ReasonModelBadReply):          store.ReasonModelBadReply,
	string(store.ReasonModelContextExceeded):   store.ReasonModelContextExceeded,
}

// crashWait bounds how long to wait for the wait status of a plugin whose
// connection broke: the failed call arrives ~1 ms before the exit.
const crashWait = 2 * time.Second

// classify turns a step's answer into a verdict. It is the only place that
// decides what a crash, a cancel or a bad result means.
func (ru *run) classify(res plugin.StepResult, err error, cause error) verdict {
	if err != nil {
		return ru.classifyError(err, cause)
	}
	s := ru.r.set
	switch res.Outcome {
	case plugin.OutcomeFail:
		reason, ok := executorReasons[res.Reason]
		msg := res.Message
		if !ok {
			reason = store.ReasonExecutorFailed
			msg = fmt.Sprintf("executor reason %q: %s", text.Truncate(res.Reason, 64), msg)
		}
		switch reason {
		case store.ReasonModelUnavailable:
			return modelVerdict(msg)
		case store.ReasonModelContextExceeded:
			// Fixed by a larger server context or a smaller
			// context_tokens, then a resume: nobody's final decision.
			v := modelVerdict(msg)
			v.reason = reason
			return v
		}
		return verdict{attempt: store.AttemptFailed, outcome: plugin.OutcomeFail, taskTo: store.StatusFailed, reason: reason, message: text.Truncate(msg, 2000)}
	case plugin.OutcomeContinue, plugin.OutcomeComplete:
	default:
		return verdict{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonExecutorFailed, message: "executor returned no outcome"}
	}
	fail := func(reason store.Reason, msg string) verdict {
		return verdict{attempt: store.AttemptFailed, outcome: res.Outcome, taskTo: store.StatusFailed, reason: reason, message: msg}
	}
	if cp := res.Checkpoint; cp != nil {
		if len(cp.Payload) > s.CheckpointMaxBytes {
			return fail(store.ReasonCheckpointTooLarge, fmt.Sprintf("checkpoint is %d bytes, limit %d (tasks.checkpoint_max_bytes); the previous checkpoint is kept", len(cp.Payload), s.CheckpointMaxBytes))
		}
		if !ru.desc.Accepts(cp.Schema) {
			return fail(store.ReasonCheckpointIncompatible, fmt.Sprintf("executor returned checkpoint schema %q it does not accept (%v)", text.Truncate(cp.Schema, 64), ru.desc.CheckpointSchemas))
		}
	}
	v := verdict{attempt: store.AttemptCompleted, outcome: res.Outcome, summary: text.TruncateRunes(res.Summary, s.SummaryChars), checkpoint: res.Checkpoint}
	if res.Outcome == plugin.OutcomeComplete {
		if len(res.Result) > s.ResultBytes {
			return fail(store.ReasonResultTooLarge, fmt.Sprintf("result is %d bytes, limit %d; the previous checkpoint is kept", len(res.Result), s.ResultBytes))
		}
		v.taskTo, v.result = store.StatusCompleted, res.Result
		if v.result == nil {
			v.result = []byte{}
		}
	}
	return v
}

// modelVerdict is the verdict on a step that gave up on the model provider:
// an outage is nobody's decision, so the task is interrupted, resumable once
// the provider is back, and the attempt keeps its observed effects for the
// re-run to replay.
func modelVerdict(msg string) verdict {
	return verdict{attempt: store.AttemptInterrupted, outcome: plugin.OutcomeFail, taskTo: store.StatusInterrupted,
		reason: store.ReasonModelUnavailable, message: text.Truncate(msg, 2000)}
}

func (ru *run) classifyError(err, cause error) verdict {
	exited := false
	// A lost connection arrives ~1 ms before the exit it usually means.
	lost := errors.Is(err, plugin.ErrConnectionLost)
	if lost {
		select {
		case <-ru.exe.Exited():
			exited = true
		case <-time.After(crashWait):
		}
	} else {
		select {
		case <-ru.exe.Exited():
			exited = true
		default:
		}
	}
	protocol := errors.Is(err, plugin.ErrProtocol)
	if exited || ((lost || protocol) && cause == nil) {
		v := verdict{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonExecutorCrashed, crashed: true, exit: plugin.ExitStatus{Code: -1}}
		if exited {
			v.exit = ru.exe.ExitStatus()
			v.message = "executor process ended during the step (" + v.exit.String() + ")"
			if l := v.exit.Limit; l != nil {
				v.limit = l.Limit
				v.message = "executor process ended during the step: " + l.Error() + " (" + v.exit.String() + ")"
			}
		} else if protocol {
			v.message = "executor broke the protocol during the step: " + text.Truncate(err.Error(), 500)
		} else {
			v.message = "executor connection lost during the step: " + text.Truncate(err.Error(), 500)
		}
		v.stderr = ru.exe.StderrTail()
		return v
	}
	if cause != nil {
		return causeVerdict(cause)
	}
	return verdict{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonExecutorFailed, message: "step call failed: " + text.Truncate(err.Error(), 1000)}
}

// causeVerdict is the verdict on an attempt whose context was cancelled.
func causeVerdict(cause error) verdict {
	switch {
	case errors.Is(cause, errUserCancelled):
		return verdict{attempt: store.AttemptCancelled, reason: store.ReasonUserCancelled}
	case errors.Is(cause, errPaused):
		return verdict{attempt: store.AttemptInterrupted, reason: store.ReasonUserPause, abandoned: true}
	case errors.Is(cause, errApprovalRejected):
		return verdict{attempt: store.AttemptFailed, reason: store.ReasonApprovalRejected, abandoned: true}
	case errors.Is(cause, errChildFailed):
		return verdict{attempt: store.AttemptFailed, reason: store.ReasonChildFailed, abandoned: true}
	case errors.Is(cause, errApprovalExpired):
		return verdict{attempt: store.AttemptFailed, reason: store.ReasonApprovalTimeout, abandoned: true}
	case errors.Is(cause, errFenced):
		return verdict{attempt: store.AttemptInterrupted, reason: store.ReasonHostLost, abandoned: true, fenced: true}
	case errors.Is(cause, errWallExceeded):
		return verdict{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonWallClockExceeded, message: "the step ran past the task's wall-clock budget"}
	default: // errShutdown
		return verdict{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonHostShutdown, message: "the host was stopped during the step"}
	}
}

// finish records v for attempt att in one transaction — with the claim of
// the next attempt when the task goes on — and returns that next attempt.
func (ru *run) finish(v verdict, att store.Attempt) (store.Attempt, bool) {
	r, t := ru.r, ru.task
	ctx := context.Background() // an outcome is recorded even while stopping
	quiet := ru.quiet
	ru.quiet = false
	if v.fenced {
		// The run that took the task over owns it now; this attempt was
		// closed with the takeover.
		return store.Attempt{}, false
	}
	if v.attempt == store.AttemptCancelled || v.abandoned {
		ru.abandon(att, v)
		return store.Attempt{}, false
	}
	wsChange, wsNext, v := ru.stepWorkspace(ctx, v, att)
	var sealed []byte
	if v.checkpoint != nil && v.attempt == store.AttemptCompleted {
		sealed = r.seal.seal(owner{TaskID: t.ID, PrincipalID: t.PrincipalID, Executor: t.Executor}, att.Number, *v.checkpoint)
	}
	// One reading of the clock for the store and for every event of the
	// outcome, the next step.started included: an event never shows more
	// than was stored, so none after it can show less.
	wall := ru.wall.used()
	f := ru.attemptEnd(v, att, sealed, wall)
	f.Workspace = wsChange
	nt, next, exhausted, err := ru.commitOutcome(ctx, f, v, att, wall)
	r.notify()
	if errors.Is(err, store.ErrFenced) {
		r.log.Error("step outcome refused: the run lost its lease to a newer run; nothing more is written for it",
			"task", ru.id, "run", ru.runID, "attempt", att.Number, "error", err)
		return store.Attempt{}, false
	}
	if errors.Is(err, store.ErrConflict) {
		// The task moved first (a cancel committed before this outcome):
		// the outcome loses and the attempt closes as what the task became.
		ru.abandon(att, v)
		return store.Attempt{}, false
	}
	if err != nil {
		ru.storeFailed(&att, err)
		return store.Attempt{}, false
	}
	ru.committed(v, att, nt, quiet)
	if wsNext != nil {
		ru.ws.committed(wsNext)
	}
	switch {
	case v.taskTo != "":
		return store.Attempt{}, false
	case exhausted != nil:
		ru.endRun(store.StatusFailed, exhausted.Budget.Reason(), exhausted.Error())
		return store.Attempt{}, false
	case next == nil:
		return store.Attempt{}, false // waiting for an approval
	}
	return *next, true
}

// attemptEnd is the store's record of attempt att ending as v: the one
// place an attempt's end is built, for a step's outcome and for a run
// the store failed (recordStoreError). sealed is its checkpoint, sealed;
// wall the task's wall time at the end.
func (ru *run) attemptEnd(v verdict, att store.Attempt, sealed []byte, wall int64) store.FinishAttempt {
	t := ru.task
	exitCode, exitSignal := -1, ""
	if v.crashed {
		exitCode, exitSignal = v.exit.Code, v.exit.Signal
	}
	return store.FinishAttempt{
		PrincipalID: t.PrincipalID, TaskID: t.ID, RunID: t.RunID, Number: att.Number,
		Status: v.attempt, Outcome: v.outcome.String(), Summary: v.summary,
		Reason: v.reason, Message: v.message,
		ExitCode: exitCode, ExitSignal: exitSignal, StderrTail: v.stderr,
		Checkpoint: sealed, Result: v.result, WallMillisUsed: wall,
		TaskTo: v.taskTo, TaskReason: v.reason, TaskMessage: v.message,
		Events: ru.outcomeEvents(v, att, wall),
	}
}

// commitOutcome records f, and claims the next attempt in the same
// transaction when the task goes on. A try that failed unavailable may
// still have committed: the next try then finds the attempt closed, and
// adopts the attempt the lost commit claimed next when it is this run's.
func (ru *run) commitOutcome(ctx context.Context, f store.FinishAttempt, v verdict, att store.Attempt, wall int64) (nt store.Task, next *store.Attempt, exhausted *store.BudgetError, err error) {
	r, t := ru.r, ru.task
	uncertain := false
	err = ru.retryWrite(func() error {
		var err error
		if v.taskTo == "" {
			after := t
			after.Budgets.Steps.Used = att.Number // the next claim follows this attempt
			after.Budgets.WallMillis.Used = max(after.Budgets.WallMillis.Used, wall)
			nt, next, exhausted, err = r.store.FinishAndClaim(ctx, f, ru.startedEvent(after))
			if uncertain && errors.Is(err, store.ErrConflict) {
				if a, at, ok := ru.adopt(); ok && a.Number == att.Number+1 {
					nt, next, exhausted, err = at, &a, nil, nil
				}
			}
		} else {
			nt, err = r.store.FinishAttempt(ctx, f)
		}
		uncertain = uncertain || errors.Is(err, store.ErrUnavailable)
		return err
	})
	return nt, next, exhausted, err
}

// committed is the run's bookkeeping once attempt att's outcome v is in
// the store as task nt.
func (ru *run) committed(v verdict, att store.Attempt, nt store.Task, quiet bool) {
	r := ru.r
	ru.task = nt
	// The next attempt is told the task's unresolved effects as they are
	// then: this one may have left some, or an operator resolved some. An
	// attempt told of none that recorded none left the set empty (an
	// operator only removes from it), and the read is skipped.
	ru.indeterminate, ru.rereadEffects = nil, !quiet
	if v.reason == store.ReasonStoreError {
		ru.settleEffects()
	}
	if v.crashed {
		r.set.Observer.PluginCrashed(nt.Executor, string(v.reason))
		ru.log("executor crashed", "attempt", att.Number, "exit", v.exit.String())
	}
	if v.attempt == store.AttemptCompleted {
		if v.checkpoint != nil {
			ru.cp = v.checkpoint
		}
		ru.recent = append(ru.recent, plugin.Summary{Step: att.Number, Text: v.summary})
		if n := r.set.RecentSummaries; len(ru.recent) > n {
			ru.recent = ru.recent[len(ru.recent)-n:]
		}
	}
}

// outcomeEvents are the events recording v for attempt att.
func (ru *run) outcomeEvents(v verdict, att store.Attempt, wall int64) []store.NewEvent {
	t := ru.task
	t.Budgets.WallMillis.Used = max(t.Budgets.WallMillis.Used, wall)
	if v.taskTo != "" {
		t.Status = v.taskTo
	}
	p := EventPayload{Attempt: att.Number, Outcome: v.outcome.String(), Reason: string(v.reason), Limit: v.limit,
		PromptTokens: v.usage.PromptTokens, CompletionTokens: v.usage.CompletionTokens, ModelMillis: v.usage.Duration.Milliseconds()}
	var evs []store.NewEvent
	if v.attempt == store.AttemptInterrupted {
		if v.crashed {
			evs = append(evs, newEvent(EventExecutorCrashed, t, EventPayload{Attempt: att.Number, Reason: string(v.reason), Exit: v.exit.String(), Limit: v.limit}))
		}
		evs = append(evs, newEvent(EventStepInterrupted, t, p))
	} else {
		evs = append(evs, newEvent(EventStepCompleted, t, p))
	}
	switch v.taskTo {
	case store.StatusCompleted:
		evs = append(evs, newEvent(EventTaskCompleted, t, EventPayload{}))
	case store.StatusFailed:
		evs = append(evs, newEvent(EventTaskFailed, t, EventPayload{Reason: string(v.reason)}))
	case store.StatusInterrupted:
		evs = append(evs, newEvent(EventTaskInterrupted, t, EventPayload{Reason: string(v.reason), Limit: v.limit}))
	case store.StatusBlocked:
		evs = append(evs, newEvent(EventTaskBlocked, t, EventPayload{Reason: string(v.reason)}))
	}
	return evs
}

// abandon closes att after the task left running without it.
func (ru *run) abandon(att store.Attempt, v verdict) {
	r, t := ru.r, ru.task
	ctx := context.Background()
	cur, err := r.store.GetTask(ctx, t.PrincipalID, t.ID)
	status, reason := store.AttemptInterrupted, v.reason
	switch {
	case err != nil:
	case cur.Status == store.StatusCancelled:
		status, reason = store.AttemptCancelled, cur.Reason
	case cur.Status == store.StatusInterrupted && cur.Reason == store.ReasonUserPause:
		status, reason = store.AttemptInterrupted, cur.Reason
	case cur.Status == store.StatusFailed:
		status, reason = store.AttemptFailed, cur.Reason
	}
	if err := ru.retryWrite(func() error {
		return r.store.AbandonAttempt(ctx, store.AbandonAttempt{
			PrincipalID: t.PrincipalID, TaskID: t.ID, Number: att.Number,
			Status: status, Reason: reason, WallMillisUsed: ru.wall.used(),
		})
	}); err != nil {
		// The task has already ended; start-up recovery closes the attempt.
		r.log.Error("attempt not closed", "task", ru.id, "attempt", att.Number, "error", err)
	}
	r.notify()
}
