package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/store"
)

// Causes a run's context is cancelled with; the step loop branches on them.
var (
	errUserCancelled = errors.New("task cancelled by its principal")
	errShutdown      = errors.New("host shutting down")
	errWallExceeded  = errors.New("wall-clock budget exhausted")
)

// run is one run of one task: from start or resume until the task leaves
// running, in one goroutine that owns one executor process.
type run struct {
	r      *Runner
	task   store.Task // as of the last change this run made
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	wall   *wallClock

	exe  Executor
	desc Description
}

func (ru *run) log(msg string, args ...any) {
	ru.r.log.Info(msg, append([]any{"task", ru.task.ID, "run", ru.task.RunID}, args...)...)
}

// loop runs steps until the task leaves running.
func (ru *run) loop() {
	defer ru.r.finished(ru)
	defer ru.cancel(nil)
	stopBeat := ru.heartbeat()
	defer stopBeat()

	exe, err := ru.r.launcher.Launch(ru.ctx, ru.task.Executor, &services{r: ru.r, taskID: ru.task.ID})
	if err != nil {
		ru.log("executor unavailable", "error", err)
		ru.endRun(store.StatusInterrupted, store.ReasonExecutorUnavailable, err.Error())
		return
	}
	ru.exe = exe
	defer exe.Stop()
	if ru.desc, err = describeChecked(ru.ctx, ru.task.Executor, exe); err != nil {
		ru.endRun(store.StatusInterrupted, store.ReasonExecutorUnavailable, err.Error())
		return
	}
	for ru.step() {
	}
}

// heartbeat persists active time at least every Settings.Heartbeat so a host
// crash loses at most one interval, which start-up recovery then charges.
func (ru *run) heartbeat() (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(ru.r.set.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := ru.r.store.Heartbeat(context.Background(), ru.task.PrincipalID, ru.task.ID, ru.task.RunID, ru.wall.used()); err != nil {
					ru.r.log.Warn("heartbeat not persisted", "task", ru.task.ID, "error", err)
				}
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// endRun records the end of the run outside any attempt, when the task is
// still running: to is interrupted or failed.
func (ru *run) endRun(to store.Status, reason store.Reason, msg string) {
	ev := EventTaskInterrupted
	if to == store.StatusFailed {
		ev = EventTaskFailed
	}
	ctx := context.Background()
	if err := ru.r.store.Heartbeat(ctx, ru.task.PrincipalID, ru.task.ID, ru.task.RunID, ru.wall.used()); err != nil {
		ru.r.log.Warn("wall time not persisted", "task", ru.task.ID, "error", err)
	}
	next := ru.task
	next.Status = to
	t, err := ru.r.store.Transition(ctx, ru.task.PrincipalID, ru.task.ID,
		[]store.Status{store.StatusRunning, store.StatusWaitingApproval}, to, reason, truncate(msg, 2000),
		newEvent(ev, next, EventPayload{Reason: string(reason)}))
	ru.r.notify()
	if err != nil {
		// Cancelled first, or the store is failing: either way nothing
		// more is ours to record.
		ru.log("run end not recorded", "to", to, "error", err)
		return
	}
	ru.task = t
}

// step runs one step and reports whether the loop should go on.
func (ru *run) step() bool {
	r := ru.r
	if err := context.Cause(ru.ctx); err != nil {
		ru.endForCause(err)
		return false
	}
	if ru.wall.remaining() <= 0 {
		ru.endRun(store.StatusFailed, store.ReasonWallClockExceeded, "the task used all of its wall-clock budget")
		return false
	}
	t, err := r.store.GetTask(ru.ctx, ru.task.PrincipalID, ru.task.ID)
	if err != nil {
		ru.log("task not readable", "error", err)
		return false
	}
	ru.task = t
	if t.Status != store.StatusRunning || t.RunID != ru.task.RunID {
		return false
	}

	// The checkpoint is verified before a step is charged for it.
	cp, err := ru.loadCheckpoint()
	if err != nil {
		ru.endRun(store.StatusFailed, store.ReasonCheckpointIncompatible, err.Error())
		return false
	}

	// Every attempt charges one step, so the new attempt's number is the
	// step count after the charge.
	next := t
	next.Budgets.Steps.Used++
	att, t, err := r.store.ClaimAttempt(ru.ctx, t.PrincipalID, t.ID, t.RunID,
		newEvent(EventStepStarted, next, EventPayload{Attempt: next.Budgets.Steps.Used}))
	r.notify()
	var be *store.BudgetError
	switch {
	case errors.As(err, &be):
		ru.endRun(store.StatusFailed, store.ReasonStepBudgetExhausted, be.Error())
		return false
	case err != nil:
		if c := context.Cause(ru.ctx); c != nil {
			ru.endForCause(c)
		} else {
			ru.log("attempt not claimed", "error", err)
		}
		return false
	}
	ru.task = t

	req, err := ru.request(att, cp)
	if err != nil {
		ru.finish(verdict{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonStoreError, message: err.Error()}, att)
		return false
	}
	tok := r.turns.issue(turn{taskID: t.ID, principal: t.PrincipalID, runID: t.RunID, attempt: att.Number})
	req.TurnToken = tok

	stepCtx, cancelStep := context.WithDeadlineCause(ru.ctx, time.Now().Add(ru.wall.remaining()), errWallExceeded)
	res, stepErr := ru.exe.Step(stepCtx, req)
	cause := context.Cause(stepCtx)
	cancelStep()
	r.turns.revoke(tok)

	v := ru.classify(res, stepErr, cause)
	return ru.finish(v, att)
}

// endForCause ends the run for the reason its context was cancelled.
func (ru *run) endForCause(cause error) {
	switch {
	case errors.Is(cause, errShutdown):
		ru.endRun(store.StatusInterrupted, store.ReasonHostShutdown, "the host was stopped")
	case errors.Is(cause, errUserCancelled):
		// The cancelled status was committed before the context was.
	default:
		ru.endRun(store.StatusInterrupted, store.ReasonHostShutdown, cause.Error())
	}
}

// loadCheckpoint opens and checks the task's stored checkpoint, if any.
func (ru *run) loadCheckpoint() (*Checkpoint, error) {
	t := ru.task
	if t.Checkpoint == nil {
		return nil, nil
	}
	cp, _, err := ru.r.seal.open(owner{TaskID: t.ID, PrincipalID: t.PrincipalID, Executor: t.Executor}, t.Checkpoint)
	if err != nil {
		return nil, err
	}
	if !ru.desc.accepts(cp.Schema) {
		return nil, fmt.Errorf("%w: executor %s %s does not accept checkpoint schema %q (it accepts %v)",
			ErrCheckpointIncompatible, ru.desc.Kind, ru.desc.Version, cp.Schema, ru.desc.CheckpointSchemas)
	}
	return &cp, nil
}

// request builds what the executor may see of the task (DESIGN §4).
func (ru *run) request(att store.Attempt, cp *Checkpoint) (StepRequest, error) {
	t := ru.task
	recent, err := ru.r.store.RecentSummaries(ru.ctx, t.PrincipalID, t.ID, ru.r.set.RecentSummaries)
	if err != nil {
		return StepRequest{}, err
	}
	req := StepRequest{
		TaskID: t.ID, RunID: t.RunID, Attempt: att.Number, Spec: t.Spec, Checkpoint: cp,
		Remaining: Budgets{
			Steps: t.Budgets.Steps.Remaining(), ToolCalls: t.Budgets.ToolCalls.Remaining(),
			ModelCalls: t.Budgets.ModelCalls.Remaining(), Depth: t.Budgets.Depth.Remaining(),
			WallSeconds: int64(ru.wall.remaining().Seconds()),
		},
		Limits: Budgets{
			Steps: t.Budgets.Steps.Limit, ToolCalls: t.Budgets.ToolCalls.Limit,
			ModelCalls: t.Budgets.ModelCalls.Limit, Depth: t.Budgets.Depth.Limit,
			WallSeconds: t.Budgets.WallMillis.Limit / 1000,
		},
	}
	for _, a := range recent {
		req.Recent = append(req.Recent, StepSummary{Step: a.Number, Summary: a.Summary})
	}
	return req, nil
}
