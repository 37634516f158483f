package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// The task tools (docs/tools.md) are served here: each acts as the
// calling task's principal, and only on the calling task's subtree (its
// descendants). A task outside it — another tree, the caller's parent, the
// caller itself for cancel/pause/resume, another principal's — is refused
// with the typed code outside_subtree, exactly as a task that does not
// exist, so an agent learns nothing of the rest of the fleet.

// Typed codes of a refused task tool call, in its result's "error".
const (
	TaskToolOutsideSubtree  = "outside_subtree"
	TaskToolTreeLimit       = "tree_limit"
	TaskToolInvalidArgument = "invalid_argument"
	TaskToolConflict        = "conflict"
	TaskToolQueueFull       = "queue_full"
	TaskToolParentDown      = "parent_down"
)

// maxTaskToolResultChars bounds the part of a task's result task.status
// returns.
const maxTaskToolResultChars = 2000

type taskToolError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// taskTool serves task tool name for the step of tr. A refusal is a tool
// result with is_error and {"error": {"code", "message"}}, which the model
// sees; only a store failure is an error.
func (r *Runner) taskTool(ctx context.Context, tr turn, name string, args json.RawMessage) (tools.Result, error) {
	out, err := r.taskToolOut(ctx, tr, name, args)
	if err == nil {
		b, err := json.Marshal(out)
		return tools.Result{Output: string(b)}, err
	}
	code := ""
	var fe *plugin.FieldError
	var ae *tools.ArgError
	var te *store.TransitionError
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, errOutsideSubtree):
		code, err = TaskToolOutsideSubtree, errOutsideSubtree
	case errors.Is(err, store.ErrTreeLimit):
		code = TaskToolTreeLimit
	case errors.Is(err, store.ErrParentDown):
		code = TaskToolParentDown
	case errors.Is(err, store.ErrQueueFull):
		code = TaskToolQueueFull
	case errors.As(err, &fe), errors.As(err, &ae), errors.Is(err, ErrInvalid):
		code = TaskToolInvalidArgument
	case errors.As(err, &te), errors.Is(err, store.ErrConflict):
		code = TaskToolConflict
	default:
		return tools.Result{}, err
	}
	b, merr := json.Marshal(map[string]taskToolError{"error": {Code: code, Message: text.Truncate(err.Error(), 500)}})
	return tools.Result{Output: string(b), IsError: true}, merr
}

var errOutsideSubtree = errors.New("no such task in this task's subtree")

type taskView struct {
	TaskID   string `json:"task_id"`
	ParentID string `json:"parent_task_id,omitempty"`
	Status   string `json:"status"`
	Reason   string `json:"reason,omitempty"`
	Depth    int64  `json:"depth,omitempty"`
}

func viewOf(t store.Task) taskView {
	return taskView{TaskID: t.ID, ParentID: t.ParentID, Status: string(t.Status), Reason: string(t.Reason), Depth: t.TreeDepth}
}

func (r *Runner) taskToolOut(ctx context.Context, tr turn, name string, args json.RawMessage) (any, error) {
	fields, err := tools.ParseTaskToolArgs(name, args)
	if err != nil {
		return nil, err
	}
	switch name {
	case tools.ToolTaskDelegate, tools.ToolTaskCreate:
		var a delegateArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, &plugin.FieldError{Field: "arguments", Message: err.Error()}
		}
		t, err := r.delegate(ctx, tr, a)
		if err != nil {
			return nil, err
		}
		return viewOf(t), nil
	case tools.ToolTaskList:
		var status string
		if raw, ok := fields["status"]; ok {
			if err := json.Unmarshal(raw, &status); err != nil {
				return nil, &plugin.FieldError{Field: "status", Message: "must be a string"}
			}
		}
		tree, err := r.store.Tree(ctx, tr.principal, tr.taskID)
		if err != nil {
			return nil, err
		}
		list := []taskView{}
		for _, t := range store.Subtree(tree, tr.taskID) {
			if status == "" || string(t.Status) == status {
				list = append(list, viewOf(t))
			}
		}
		return map[string]any{"tasks": list}, nil
	}
	var id string
	if err := json.Unmarshal(fields["task_id"], &id); err != nil || id == "" {
		return nil, &plugin.FieldError{Field: "task_id", Message: "is required: a task id string"}
	}
	t, tree, err := r.inSubtree(ctx, tr, id)
	if err != nil {
		return nil, err
	}
	switch name {
	case tools.ToolTaskStatus:
		var kids []string
		for _, c := range store.Children(tree, t.ID) {
			kids = append(kids, c.ID)
		}
		return map[string]any{"task_id": t.ID, "parent_task_id": t.ParentID, "status": t.Status, "reason": t.Reason,
			"message": t.Message, "steps": meter(t.Budgets.Steps), "result": text.TruncateRunes(string(t.Result), maxTaskToolResultChars),
			"children": kids}, nil
	case tools.ToolTaskCancel:
		t, err = r.Cancel(ctx, tr.principal, id)
	case tools.ToolTaskPause:
		t, err = r.Pause(ctx, tr.principal, id)
	case tools.ToolTaskResume:
		t, err = r.Resume(ctx, tr.principal, id)
	default:
		return nil, &plugin.FieldError{Field: "name", Message: fmt.Sprintf("%q is not a task tool", text.Truncate(name, 64))}
	}
	if err != nil {
		return nil, err
	}
	return viewOf(t), nil
}

// inSubtree is task id when it is a descendant of the task of tr (same
// principal, same tree, below it), with the tree; else errOutsideSubtree.
func (r *Runner) inSubtree(ctx context.Context, tr turn, id string) (store.Task, []store.Task, error) {
	tree, err := r.store.Tree(ctx, tr.principal, tr.taskID)
	if err != nil {
		return store.Task{}, nil, err
	}
	sub := store.Subtree(tree, tr.taskID)
	i := slices.IndexFunc(sub, func(t store.Task) bool { return t.ID == id })
	if i < 0 {
		return store.Task{}, nil, errOutsideSubtree
	}
	return sub[i], tree, nil
}
