package host

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// EventEffectResolved records one resolution of an unsettled effect: its
// attempt, the resolution (Outcome), and in Note the effect and who
// resolved it.
const EventEffectResolved = "effect.resolved"

// rerunGate is the one place that decides whether a tool call may run
// again an effect the task left unsettled (DESIGN §6). The store answers,
// not this step's memory, so the refusal holds in every later attempt, run
// and host until the effect is resolved. It returns the unsettled effects
// the call would re-run: for a call whose tool asks an approval anyway
// (gated), the approval is then bound to them; for any other call, any
// such effect refuses it, before admission, so the refusal charges no
// budget. A call the tool de-duplicates by the key both attempts gave it
// (idempotentRetry) re-runs none of them. The caller exempts calls that are
// the same when run twice (rerunSafe).
func (s *taskServices) rerunGate(ctx context.Context, ts *turnState, e store.NewEffect, gated bool) ([]store.Effect, error) {
	prevs, err := s.r.store.UnsettledEffects(ctx, ts.principal, ts.taskID, ts.attempt, e.Fingerprint, e.IdempotencyKey)
	if err != nil {
		return nil, effectError(ts, err)
	}
	var rerun []store.Effect
	for _, p := range prevs {
		if !idempotentRetry(e, p) {
			rerun = append(rerun, p)
		}
	}
	if len(rerun) == 0 || gated {
		return rerun, nil
	}
	prev := rerun[0]
	s.r.log.Warn("re-run of an unsettled effect refused: no approval for the retry", "task", ts.taskID,
		"attempt", ts.attempt, "effect_attempt", prev.Attempt, "effect_seq", prev.Seq, "status", prev.Status)
	return nil, &plugin.UnsettledEffectError{Effect: effectView(prev)}
}

// rerunPrompt is a gated call's approval prompt: what would run, and, when
// the call re-issues an unsettled effect, the host's word that it may
// already have run once — so the approver never sees the first approval's
// text for its retry.
func rerunPrompt(describe string, rerun []store.Effect) string {
	if len(rerun) == 0 {
		return describe
	}
	p := rerun[0]
	note := fmt.Sprintf(" [taskhost: this call may already have run once: attempt %d, %s", p.Attempt, p.Status)
	if n := len(rerun) - 1; n > 0 {
		note += fmt.Sprintf(", and %d earlier time(s)", n)
	}
	return describe + note + "; approving runs it again]"
}

// resolveEffect resolves the unsettled effect (e.TaskID, e.Attempt, e.Seq)
// of principal's task as to, by by (an approval's id, the executor or an
// operator), with its effect.resolved event in the same transaction. admin
// is the admin principal acting on another principal's task ("" none).
func (r *Runner) resolveEffect(ctx context.Context, principal string, e store.Effect, to store.EffectResolution, by, admin string) (store.Effect, error) {
	t, err := r.store.GetTask(ctx, principal, e.TaskID)
	if err != nil {
		return store.Effect{}, err
	}
	ev := newEvent(EventEffectResolved, r.liveMeters(t), EventPayload{Attempt: e.Attempt, Outcome: string(to),
		Note: fmt.Sprintf("effect %d/%d by %s", e.Attempt, e.Seq, by), By: admin})
	out, err := r.store.ResolveEffect(ctx, store.ResolveEffect{PrincipalID: principal, TaskID: e.TaskID,
		Attempt: e.Attempt, Seq: e.Seq, To: to, By: by}, ev)
	r.notify()
	if err != nil {
		return store.Effect{}, err
	}
	r.log.Info("unsettled effect resolved", "task", e.TaskID, "effect_attempt", e.Attempt, "effect_seq", e.Seq,
		"resolution", to, "by", by)
	return out, nil
}

// AbandonEffect gives up the task's unsettled tool effect (attempt, seq)
// for the executor: the gate stops refusing the same call as its re-run.
// A call issued after it is a new call under its tool's policy (an
// approval where the policy asks one), never an automatic retry of it.
func (s *taskServices) AbandonEffect(ctx context.Context, tok string, attempt, seq int64) error {
	ts, err := s.authorizeState("AbandonEffect", tok)
	if err != nil {
		return err
	}
	if attempt < 1 || seq < 1 {
		return &plugin.FieldError{Field: "attempt", Message: fmt.Sprintf("an effect's attempt and seq are positive, got %d and %d", attempt, seq)}
	}
	_, err = s.r.resolveEffect(ctx, ts.principal, store.Effect{TaskID: ts.taskID, Attempt: attempt, Seq: seq}, store.ResolutionAbandoned, store.ResolvedByExecutor, "")
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
		return &plugin.FieldError{Field: "seq", Message: err.Error()}
	case err != nil:
		return effectError(ts, err)
	}
	ts.forget(attempt, seq)
	return nil
}

// forget drops (attempt, seq) from the unsettled effects the step was told
// of: a later approval of the step does not count it.
func (ts *turnState) forget(attempt, seq int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.unsettledTools = slices.DeleteFunc(slices.Clone(ts.unsettledTools), func(e plugin.Effect) bool {
		return e.Attempt == attempt && e.Seq == seq
	})
}

// UnsettledEffects lists the effects of principal's task that were
// unsettled, resolved or not, newest first (at most 100): what status shows.
func (r *Runner) UnsettledEffects(ctx context.Context, principal, id string) ([]store.Effect, error) {
	return r.store.UnsettledHistory(ctx, principal, id)
}

// ResolveEffect resolves the unsettled effect (attempt, seq) of principal's
// task for operator, who is principal or an admin acting on the task: the
// resolution records "operator:" and the operator.
func (r *Runner) ResolveEffect(ctx context.Context, principal, id string, attempt, seq int64, to store.EffectResolution, operator string) (store.Effect, error) {
	admin := ""
	if operator != principal {
		admin = operator
	}
	return r.resolveEffect(ctx, principal, store.Effect{TaskID: id, Attempt: attempt, Seq: seq}, to, store.ResolvedByOperatorPrefix+operator, admin)
}
