package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/store"
)

// Causes a run ends with when its approval is refused. The task's failure
// was committed with the refusal.
var (
	errApprovalRejected = errors.New("approval rejected")
	errApprovalExpired  = errors.New("approval expired")
)

// Approval kinds, as the API reports them: a gated tool call, an
// executor's yes/no question, or an executor's question answered with a
// JSON value (sdk.Host.RequestInput).
const (
	ApprovalKindTool     = "tool"
	ApprovalKindApproval = "approval"
	ApprovalKindInput    = "input"
)

// inputTool marks an input approval in the approvals row's tool column: no
// tool is named so (tool names are dotted words), and the row needs no
// column of its own for the kind.
const inputTool = "(input)"

// MaxInputValue bounds the JSON value an input approval is answered with,
// as the principal sent it; it fits the effect ledger's replay bound, so a
// re-run of the step gets the same answer without asking again.
const MaxInputValue = 64 << 10

// ApprovalKind tells what an approval asks for.
func ApprovalKind(a store.Approval) string {
	switch a.Tool {
	case "":
		return ApprovalKindApproval
	case inputTool:
		return ApprovalKindInput
	}
	return ApprovalKindTool
}

// resolution is how an approval was resolved, with the answer of an input
// approval.
type resolution struct {
	status store.ApprovalStatus
	value  []byte
}

// waiter is a step blocked on one approval.
type waiter struct {
	taskID    string
	principal string
	decision  chan resolution // buffered 1
}

// awaitApproval records a pending approval, moving the task to
// waiting_approval in the same transaction, and blocks until the approval is
// resolved — approved (nil), rejected or expired (the task has failed and the
// run is ending) — or ctx ends (a cancel, a shutdown).
func (r *Runner) awaitApproval(ctx context.Context, ts *turnState, seq int64, tool, prompt string, b binding) (id string, err error) {
	id, _, err = r.awaitAnswer(ctx, ts, seq, tool, prompt, b)
	return id, err
}

// binding ties a tool's approval to the effect it gates: the effect's
// ledger fingerprint, and the subject an allow-for-task pattern matches
// (what the approver was shown of the call). An executor's question has
// none.
type binding struct{ fingerprint, subject string }

// awaitAnswer is awaitApproval returning the value an input approval
// (tool inputTool) was answered with: compact JSON, "null" when none.
func (r *Runner) awaitAnswer(ctx context.Context, ts *turnState, seq int64, tool, prompt string, b binding) (string, []byte, error) {
	timeout := r.svc.ApprovalTimeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	id := "a_" + randomToken()[:26]
	w := &waiter{taskID: ts.taskID, principal: ts.principal, decision: make(chan resolution, 1)}
	r.mu.Lock()
	r.waiters[id] = w
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
	}()

	t, err := r.store.GetTask(ctx, ts.principal, ts.taskID)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", plugin.ErrStepEnded, err)
	}
	t.Status = store.StatusWaitingApproval
	// The wait is not active time: the clock pauses before the event reads
	// it, so the event, the store and every later reading agree.
	resume := r.pauseWall(ctx, ts)
	defer resume()
	_, _, err = r.store.RequestApproval(ctx, store.NewApproval{
		ID: id, PrincipalID: ts.principal, TaskID: ts.taskID, RunID: ts.runID, Attempt: ts.attempt, Seq: seq,
		Tool: tool, Prompt: prompt, ExpiresAt: time.Now().Add(timeout), Fingerprint: b.fingerprint, Subject: b.subject,
	}, newEvent(EventTaskWaitingApproval, r.liveMeters(t), EventPayload{Attempt: ts.attempt, Note: id}))
	r.notify()
	if err != nil {
		return "", nil, effectError(ts, err)
	}
	expiry := time.AfterFunc(timeout, func() {
		_, _ = r.resolve(context.Background(), ts.principal, id, store.ApprovalExpired, nil)
	})
	defer expiry.Stop()

	select {
	case d := <-w.decision:
		if d.status == store.ApprovalApproved {
			return id, d.value, nil
		}
		return "", nil, &plugin.ApprovalRefusedError{ID: id, Status: string(d.status)}
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
}

// pauseWall stops charging ts's run wall time until resume is called, and
// stores the reading the wait will keep, so that status shows during the
// wait what watch does.
func (r *Runner) pauseWall(ctx context.Context, ts *turnState) (resume func()) {
	r.mu.Lock()
	ru := r.runs[ts.taskID]
	r.mu.Unlock()
	if ru == nil || ru.runID != ts.runID {
		return func() {}
	}
	resume = ru.wall.pause()
	if err := r.store.Heartbeat(ctx, ts.principal, ts.taskID, ts.runID, ru.wall.used()); err != nil {
		r.log.Warn("wall time not persisted", "task", ts.taskID, "error", err)
	}
	return resume
}

// deliver hands res to the step waiting on approval id on this host, and
// reports whether one waits. The first decision delivered wins: the lease
// watch may have delivered a refusal already (watchLeases).
func (r *Runner) deliver(id string, res resolution) bool {
	r.mu.Lock()
	w := r.waiters[id]
	r.mu.Unlock()
	if w == nil {
		return false
	}
	select {
	case w.decision <- res:
	default:
	}
	return true
}

// Approvals lists principal's approvals, optionally only those in st.
func (r *Runner) Approvals(ctx context.Context, principal string, st store.ApprovalStatus) ([]store.Approval, error) {
	return r.store.ListApprovals(ctx, principal, st)
}

// Approve resolves a pending approval as approved: the task runs again and
// the gated effect proceeds. It is refused if the approval was already
// resolved or its task cancelled.
func (r *Runner) Approve(ctx context.Context, principal, id string) (store.Approval, error) {
	return r.resolve(ctx, principal, id, store.ApprovalApproved, nil)
}

// ApproveForTask approves a pending tool approval, and for the rest of its
// task the calls of the same tool whose subject (a shell.run command, a
// tool's arguments as the approver was shown them) matches pattern, a glob
// of '*' and '?' of at most store.MaxGrantPattern bytes; "" allows only
// the same call again (by its fingerprint). A covered call runs without asking, its
// cover recorded in the ledger and the task's events; a call that may
// already have run once (an unsettled effect) is always asked again.
func (r *Runner) ApproveForTask(ctx context.Context, principal, id, pattern string) (store.Approval, error) {
	switch {
	case len(pattern) > store.MaxGrantPattern:
		return store.Approval{}, &plugin.FieldError{Field: "pattern", Message: fmt.Sprintf("is %d bytes, limit %d", len(pattern), store.MaxGrantPattern)}
	case tools.Printable(pattern, store.MaxGrantPattern+1) != pattern:
		return store.Approval{}, &plugin.FieldError{Field: "pattern", Message: "holds control or non-printable characters, which no subject shows unescaped"}
	}
	cur, err := r.store.GetApproval(ctx, principal, id)
	if err != nil {
		return store.Approval{}, err
	}
	if ApprovalKind(cur) != ApprovalKindTool || cur.Fingerprint == "" {
		return store.Approval{}, &plugin.FieldError{Field: "for_task", Message: fmt.Sprintf(
			"approval %s is a %s approval: only a tool call's approval can allow the rest of its task; approve it once", id, ApprovalKind(cur))}
	}
	return r.resolveAs(ctx, principal, id, store.ApprovalApproved, nil, &pattern)
}

// Answer approves an input approval with value, one JSON value of at most
// MaxInputValue bytes, which the waiting step receives. A value for an
// approval of another kind is refused: it would be dropped unread.
func (r *Runner) Answer(ctx context.Context, principal, id string, value []byte) (store.Approval, error) {
	if len(value) > MaxInputValue {
		return store.Approval{}, &plugin.FieldError{Field: "value_json", Message: fmt.Sprintf("the value is %d bytes, limit %d", len(value), MaxInputValue)}
	}
	var b bytes.Buffer
	if err := json.Compact(&b, value); err != nil {
		return store.Approval{}, &plugin.FieldError{Field: "value_json", Message: fmt.Sprintf("the value (%d bytes) is not one JSON value: %v", len(value), err)}
	}
	return r.resolve(ctx, principal, id, store.ApprovalApproved, b.Bytes())
}

// Reject resolves a pending approval as rejected: the task fails
// (approval_rejected) and its step is stopped.
func (r *Runner) Reject(ctx context.Context, principal, id string) (store.Approval, error) {
	return r.resolve(ctx, principal, id, store.ApprovalRejected, nil)
}

// resolve is the one path every resolution takes: a compare-and-set on the
// approval and its task in one transaction, then the waiting step is told,
// and a refused one is ended. value is the answer of an input approval
// (nil: none, which answers null).
func (r *Runner) resolve(ctx context.Context, principal, id string, to store.ApprovalStatus, value []byte) (store.Approval, error) {
	return r.resolveAs(ctx, principal, id, to, value, nil)
}

// resolveAs is resolve, approving for the rest of the task (GrantApproval)
// when pattern is set.
func (r *Runner) resolveAs(ctx context.Context, principal, id string, to store.ApprovalStatus, value []byte, pattern *string) (store.Approval, error) {
	cur, err := r.store.GetApproval(ctx, principal, id)
	if err != nil {
		return store.Approval{}, err
	}
	if kind := ApprovalKind(cur); value != nil && kind != ApprovalKindInput {
		return store.Approval{}, &plugin.FieldError{Field: "value_json", Message: fmt.Sprintf(
			"approval %s is a %s approval, which takes no value (only an executor's question, kind input, does): approve it without one", id, kind)}
	}
	if value == nil {
		value = []byte("null")
	}
	t, err := r.store.GetTask(ctx, principal, cur.TaskID)
	if err != nil {
		return store.Approval{}, err
	}
	if err := r.answeredHere(ctx, principal, cur, to); err != nil {
		return store.Approval{}, err
	}
	t = r.liveMeters(t)
	t.Status = store.StatusRunning
	var failed store.Reason
	switch to {
	case store.ApprovalRejected:
		t.Status, failed = store.StatusFailed, store.ReasonApprovalRejected
	case store.ApprovalExpired:
		t.Status, failed = store.StatusFailed, store.ReasonApprovalTimeout
	}
	evs := []store.NewEvent{newEvent(EventApprovalResolved, t, EventPayload{Attempt: cur.Attempt, Outcome: string(to), Note: id})}
	if failed != "" {
		evs = append(evs, newEvent(EventTaskFailed, t, EventPayload{Reason: string(failed)}))
	}
	var a store.Approval
	if pattern != nil {
		a, _, err = r.store.GrantApproval(ctx, principal, id, *pattern, evs...)
	} else {
		a, _, err = r.store.ResolveApproval(ctx, principal, id, to, evs...)
	}
	r.notify()
	if err != nil {
		return store.Approval{}, err
	}
	r.mu.Lock()
	ru := r.runs[a.TaskID]
	r.mu.Unlock()
	if !r.deliver(id, resolution{status: to, value: value}) {
		r.notifyOwner(ctx, principal, a.TaskID) // its step may wait on another host
	}
	if ru != nil && to != store.ApprovalApproved {
		cause := errApprovalRejected
		if to == store.ApprovalExpired {
			cause = errApprovalExpired
		}
		ru.cancel(cause)
	}
	return a, nil
}

// workspace is the directory of a task's workspace.
func (r *Runner) workspace(taskID string) string {
	return r.workspaceRoot + "/" + taskID
}

// covers reports whether grant, an allow-for-task approval, covers a call
// of tool with fingerprint fp whose approval subject is subject: the same
// call (its fingerprint: every argument, not only what a subject shows)
// when the approver declared no pattern, else one whose subject the
// pattern matches whole — and only a subject shown whole: a tool's
// arguments cut to tools.MaxDescribeBytes could hide what follows.
func covers(grant store.Approval, tool, subject, fp string) bool {
	if grant.Pattern == "" {
		return grant.Fingerprint == fp
	}
	whole := tool == tools.ToolShellRun || len(subject) <= tools.MaxDescribeBytes
	return whole && globMatch(grant.Pattern, subject)
}

// globMatch matches s whole against pattern, in which '*' stands for any
// run of characters (a '/' or a space too) and '?' for one character;
// everything else is itself. No character class, no escape: a declared
// pattern reads as what it allows. It runs in O(len(pattern)·len(s)).
func globMatch(pattern, s string) bool {
	p, t := []rune(pattern), []rune(s)
	pi, ti := 0, 0
	star, mark := -1, 0
	for ti < len(t) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == t[ti]):
			pi++
			ti++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ti
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			ti = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// coveredByGrant looks for an allow-for-task approval of the task that
// covers a call of tool with subject; when one does, the cover is recorded
// in the ledger — an approval effect bound to the grant and the call's
// fingerprint — and in the task's events (approval.covered), and the
// grant's id is returned.
func (s *taskServices) coveredByGrant(ctx context.Context, ts *turnState, tool, subject, fp string) (string, bool, error) {
	grants, err := s.r.store.TaskGrants(ctx, ts.principal, ts.taskID, tool)
	if err != nil {
		return "", false, effectError(ts, err)
	}
	for _, g := range grants {
		if !covers(g, tool, subject, fp) {
			continue
		}
		e := store.NewEffect{Kind: store.EffectApproval, Fingerprint: fingerprint([]byte("grant"), []byte(g.ID), []byte(fp)),
			Summary: "covered by " + g.ID}
		if _, _, err := s.ledgered(ctx, ts, e, nil, true, replayEarlier, func(context.Context) ([]byte, store.Charge, error) {
			return []byte(`"approved"`), store.Charge{}, nil
		}); err != nil {
			return "", false, err
		}
		t, err := s.r.store.GetTask(ctx, ts.principal, ts.taskID)
		if err == nil {
			_, err = s.r.store.AppendEvents(ctx, ts.principal, ts.taskID, ts.runID,
				newEvent(EventApprovalCovered, s.r.liveMeters(t), EventPayload{Attempt: ts.attempt, Note: g.ID}))
			s.r.notify()
		}
		if err != nil {
			// The ledger holds the cover; the event is a notice.
			s.r.log.Warn("approval.covered event not recorded", "task", ts.taskID, "error", err)
		}
		s.r.log.Info("tool call covered by an allow-for-task approval", "task", ts.taskID, "attempt", ts.attempt, "tool", tool, "approval", g.ID)
		return g.ID, true, nil
	}
	return "", false, nil
}
