package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// Task trees (issue 25 item 3). A running task delegates a child through
// the tool task.delegate (sdk.Host.Delegate calls it): the child is
// created pending, in the queue, under the parent's principal, with budgets
// taken from the parent's remaining ones (splitBudgets). A parent whose step
// ends while a child has not ended is blocked (waiting_children) and its
// run ends, so it holds no slot; store.SettleTrees then decides, in one
// transaction per tree, what a child's end does to its parent and a
// parent's end to its subtree, and settleTrees signals the runs it stopped.

// Event types of a tree.
const (
	// EventTaskBlocked: the task waits for its children (waiting_children).
	// A delegated child's task.created names its parent in its note.
	EventTaskBlocked = "task.blocked"
)

// errChildFailed is the cause a run is stopped with when a child's end
// failed its task (the failure is committed first).
var errChildFailed = errors.New("a child task failed")

// maxChildResults bounds the children a step is told of, and
// maxChildResultChars the part of each child's result it sees: 64 of
// at most 1000 characters each, so at most ~64 KB of results.
const (
	maxChildResults     = store.MaxSubagentsLimit
	maxChildResultChars = 1000
)

// splitBudgets is a child's share of its parent's budgets: req (zero:
// unset) or, unset, the smaller of the host's default and half of what
// the parent has left, and never more than the parent has left. charge
// is what the parent's used counters grow by when the child is created:
// the child's steps, tool calls and model calls, in full (what the child
// leaves unused is not given back). Depth and wall time are bounds, not
// charges: the child's depth limit and wall limit are at most the
// parent's depth limit and remaining wall time; the parent's own wall
// clock does not run while it is blocked.
func splitBudgets(parent store.Budgets, req, def Limits) (child, charge store.Budgets, err error) {
	share := func(field string, want, dflt int64, left int64, least int64) (int64, error) {
		if want < 0 {
			return 0, &plugin.FieldError{Field: field, Message: fmt.Sprintf("is %d: must not be negative", want)}
		}
		if want > left {
			return 0, &plugin.FieldError{Field: field, Message: fmt.Sprintf("is %d: more than the parent task has left (%d)", want, left)}
		}
		if want == 0 {
			want = min(dflt, max(left/2, min(least, left)))
		}
		if want < least {
			return 0, &plugin.FieldError{Field: field, Message: fmt.Sprintf("the parent task has %d left: a child needs at least %d", left, least)}
		}
		return want, nil
	}
	if child.Steps.Limit, err = share("max_steps", req.Steps, def.Steps, parent.Steps.Remaining(), 1); err != nil {
		return
	}
	if child.ToolCalls.Limit, err = share("max_tool_calls", req.ToolCalls, def.ToolCalls, parent.ToolCalls.Remaining(), 0); err != nil {
		return
	}
	if child.ModelCalls.Limit, err = share("max_model_calls", req.ModelCalls, def.ModelCalls, parent.ModelCalls.Remaining(), 0); err != nil {
		return
	}
	child.Depth.Limit = parent.Depth.Limit
	if req.Depth > 0 {
		child.Depth.Limit = min(req.Depth, parent.Depth.Limit)
	}
	wallLeft := parent.WallMillis.Remaining() / 1000
	var wall int64
	if wall, err = share("max_wall_seconds", req.WallSeconds, def.WallSeconds, wallLeft, 1); err != nil {
		return
	}
	child.WallMillis.Limit = wall * 1000
	if child.ModelTokens.Limit, err = share("max_model_tokens", req.ModelTokens, def.ModelTokens, parent.ModelTokens.Remaining(), 0); err != nil {
		return
	}
	if child.OutputBytes.Limit, err = share("max_output_bytes", req.OutputBytes, def.OutputBytes, parent.OutputBytes.Remaining(), 0); err != nil {
		return
	}
	charge.Steps.Used, charge.ToolCalls.Used, charge.ModelCalls.Used = child.Steps.Limit, child.ToolCalls.Limit, child.ModelCalls.Limit
	charge.ModelTokens.Used, charge.OutputBytes.Used = child.ModelTokens.Limit, child.OutputBytes.Limit
	return child, charge, nil
}

// delegateArgs are task.delegate's (and task.create's) arguments.
type delegateArgs struct {
	Goal           string          `json:"goal"`
	Executor       string          `json:"executor"`
	Options        json.RawMessage `json:"options"`
	MaxSteps       int64           `json:"max_steps"`
	MaxToolCalls   int64           `json:"max_tool_calls"`
	MaxModelCalls  int64           `json:"max_model_calls"`
	MaxDepth       int64           `json:"max_depth"`
	MaxWallSeconds int64           `json:"max_wall_seconds"`
	MaxModelTokens int64           `json:"max_model_tokens"`
	MaxOutputBytes int64           `json:"max_output_bytes"`
}

// delegate creates a child of the task of tr, running in tr's run.
func (r *Runner) delegate(ctx context.Context, tr turn, a delegateArgs) (store.Task, error) {
	parent, err := r.store.GetTask(ctx, tr.principal, tr.taskID)
	if err != nil {
		return store.Task{}, err
	}
	spec := map[string]json.RawMessage{}
	if len(a.Options) > 0 && !bytes.Equal(a.Options, []byte("null")) {
		if err := json.Unmarshal(a.Options, &spec); err != nil {
			return store.Task{}, &plugin.FieldError{Field: "options", Message: "must be a JSON object of the child's executor options"}
		}
	}
	goal, _ := json.Marshal(a.Goal)
	spec["goal"] = goal
	raw, err := json.Marshal(spec)
	if err != nil {
		return store.Task{}, err
	}
	if err := r.validateSpec(raw); err != nil {
		return store.Task{}, err
	}
	kind := a.Executor
	if kind == "" {
		kind = parent.Executor
	}
	if _, err := r.preflight(ctx, kind); err != nil {
		return store.Task{}, err
	}
	limits, charge, err := splitBudgets(parent.Budgets, Limits{Steps: a.MaxSteps, ToolCalls: a.MaxToolCalls, ModelCalls: a.MaxModelCalls, Depth: a.MaxDepth, WallSeconds: a.MaxWallSeconds,
		ModelTokens: a.MaxModelTokens, OutputBytes: a.MaxOutputBytes}, r.set.Defaults)
	if err != nil {
		return store.Task{}, err
	}
	nt := store.NewTask{ID: newTaskID(), PrincipalID: tr.principal, Executor: kind, Spec: raw, Limits: limits, Workspace: seedChange(nil)}
	ev := newEvent(EventTaskCreated, store.Task{ID: nt.ID, Executor: kind, Status: store.StatusPending, Budgets: limits}, EventPayload{Note: "delegated by " + parent.ID})
	t, err := r.store.CreateChild(ctx, store.NewChild{Task: nt, ParentID: parent.ID, ParentRunID: tr.runID, Charge: charge,
		MaxSubagents: r.set.MaxSubagents, MaxDepth: r.set.MaxTreeDepth, QueueLimit: r.set.MaxQueued}, ev)
	r.notify()
	if err != nil {
		return store.Task{}, err
	}
	r.mu.Lock()
	if ru := r.runs[parent.ID]; ru != nil && ru.runID == tr.runID {
		ru.delegated.Store(true)
	}
	r.mu.Unlock()
	r.kickQueue()
	return t, nil
}

// kickQueue starts what the queue's free slots allow, off the caller's
// goroutine.
func (r *Runner) kickQueue() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if len(r.dispatch(context.Background())) > 0 {
			r.notify()
		}
	}()
}

// hasLiveChildren reports whether task id of principal has a child that
// has not ended.
func (r *Runner) hasLiveChildren(ctx context.Context, principal, id string) (bool, error) {
	tree, err := r.store.Tree(ctx, principal, id)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(store.Children(tree, id), func(c store.Task) bool { return !c.Status.Terminal() }), nil
}

// treeEventType is the event recording a task's move by a tree rule.
func treeEventType(st store.Status) string {
	switch st {
	case store.StatusPending:
		return EventTaskQueued
	case store.StatusBlocked:
		return EventTaskBlocked
	case store.StatusFailed:
		return EventTaskFailed
	case store.StatusCancelled:
		return EventTaskCancelled
	default:
		return EventTaskInterrupted
	}
}

func treeEvents(t store.Task) []store.NewEvent {
	return []store.NewEvent{newEvent(treeEventType(t.Status), t, EventPayload{Reason: string(t.Reason)})}
}

// settleTrees applies the tree rules (store.SettleTrees) and stops the
// local runs of the tasks they moved out of running; woken parents join
// the queue, which is kicked.
func (r *Runner) settleTrees(ctx context.Context) {
	r.treeMu.Lock()
	changed, err := r.store.SettleTrees(ctx, treeEvents)
	r.treeMu.Unlock()
	if err != nil {
		r.log.Warn("task trees not settled; they are settled again at the next run end or queue poll", "error", err)
	}
	r.afterTreeChange(ctx, changed)
}

func (r *Runner) afterTreeChange(ctx context.Context, changed []store.Task) {
	if len(changed) == 0 {
		return
	}
	r.notify()
	queued := false
	for _, t := range changed {
		switch t.Status {
		case store.StatusCancelled:
			r.signalRun(ctx, t.PrincipalID, t.ID, errUserCancelled)
		case store.StatusFailed:
			r.signalRun(ctx, t.PrincipalID, t.ID, errChildFailed)
		case store.StatusInterrupted:
			r.signalRun(ctx, t.PrincipalID, t.ID, errPaused)
		case store.StatusPending:
			queued = true
		}
	}
	if queued {
		r.kickQueue()
	}
}

// resumeTree resumes an interrupted task with children that have not
// ended, and its interrupted descendants, in one transaction.
func (r *Runner) resumeTree(ctx context.Context, principal, id string) (store.Task, error) {
	r.treeMu.Lock()
	changed, err := r.store.ResumeTree(ctx, principal, id, r.set.MaxQueued, treeEvents)
	r.treeMu.Unlock()
	if err != nil {
		return store.Task{}, err
	}
	r.afterTreeChange(ctx, changed)
	r.kickQueue()
	return r.store.GetTask(ctx, principal, id)
}

// parentDown refuses the resume of a child whose parent is interrupted or
// has ended.
func (r *Runner) parentDown(ctx context.Context, t store.Task) error {
	if t.ParentID == "" {
		return nil
	}
	p, err := r.store.GetTask(ctx, t.PrincipalID, t.ParentID)
	if err != nil {
		return err
	}
	if p.Status.Terminal() || p.Status == store.StatusInterrupted {
		return &store.ParentDownError{TaskID: t.ID, ParentID: p.ID, ParentStatus: p.Status}
	}
	return nil
}

// childResults are the children of the task of ru, as its next step is
// told of them (childTasks).
func (ru *run) childResults(ctx context.Context) []plugin.ChildTask {
	tree, err := ru.r.store.Tree(ctx, ru.principal, ru.id)
	if err != nil {
		return nil
	}
	return childTasks(tree, ru.id)
}

// childTasks are tree's children of id, oldest first: at most
// maxChildResults, each result cut to maxChildResultChars characters.
func childTasks(tree []store.Task, id string) []plugin.ChildTask {
	var out []plugin.ChildTask
	for _, c := range store.Children(tree, id) {
		if len(out) == maxChildResults {
			break
		}
		out = append(out, plugin.ChildTask{TaskID: c.ID, Status: string(c.Status), Reason: string(c.Reason),
			Result: text.TruncateRunes(string(c.Result), maxChildResultChars)})
	}
	return out
}

// Tree returns the tree principal's task id belongs to: its root and
// every task delegated under it, in creation order.
func (r *Runner) Tree(ctx context.Context, principal, id string) ([]store.Task, error) {
	tree, err := r.store.Tree(ctx, principal, id)
	for i := range tree {
		tree[i] = r.overlay(tree[i])
	}
	return tree, err
}
