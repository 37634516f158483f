package api

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

var (
	idRE       = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	executorRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

// checkID validates an id field: present, bounded, no odd characters.
func checkID(field, id string) error {
	switch {
	case id == "":
		return invalid(field, "is required")
	case len(id) > maxIDBytes:
		return invalid(field, fmt.Sprintf("is %d bytes, at most %d", len(id), maxIDBytes))
	case !idRE.MatchString(id):
		return invalid(field, "may hold only letters, digits, '_' and '-'")
	}
	return nil
}

var taskStatuses = map[string]store.Status{
	"pending": store.StatusPending, "running": store.StatusRunning, "waiting_approval": store.StatusWaitingApproval,
	"blocked": store.StatusBlocked, "completed": store.StatusCompleted, "failed": store.StatusFailed, "cancelled": store.StatusCancelled,
	"interrupted": store.StatusInterrupted,
}

var approvalStatuses = map[string]store.ApprovalStatus{
	"pending": store.ApprovalPending, "approved": store.ApprovalApproved, "rejected": store.ApprovalRejected,
	"expired": store.ApprovalExpired, "cancelled": store.ApprovalCancelled,
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func meter(b store.Budget) *apipb.Meter { return &apipb.Meter{Used: b.Used, Limit: b.Limit} }

// taskPB converts a task; full adds the spec and the result.
func taskPB(t store.Task, full bool) *apipb.Task {
	b := t.Budgets
	v := &apipb.Task{
		Id: t.ID, Principal: t.PrincipalID, Executor: t.Executor, Status: string(t.Status),
		Reason: string(t.Reason), Message: t.Message, RunId: t.RunID,
		Budgets: &apipb.Budgets{
			Steps: meter(b.Steps), ToolCalls: meter(b.ToolCalls), ModelCalls: meter(b.ModelCalls),
			Depth: meter(b.Depth), WallMs: meter(b.WallMillis),
			ModelTokens: meter(b.ModelTokens), OutputBytes: meter(b.OutputBytes), ModelTokensEstimatedCalls: b.TokensEstimated,
		},
		CreatedUnixNano: nanos(t.CreatedAt), UpdatedUnixNano: nanos(t.UpdatedAt),
		ParentTaskId: t.ParentID, RootTaskId: t.RootID, TreeDepth: t.TreeDepth,
	}
	if full {
		v.Spec, v.Result = t.Spec, t.Result
	}
	return v
}

// TaskMessage is task t as GetTask sends it (spec and result included),
// for a reader of the store that shows it as the daemon's clients do
// (taskhost inspect).
func TaskMessage(t store.Task) *apipb.Task { return taskPB(t, true) }

// AttemptMessage is attempt a as GetTask sends it.
func AttemptMessage(a store.Attempt) *apipb.Attempt { return attemptPB(a) }

func attemptPB(a store.Attempt) *apipb.Attempt {
	return &apipb.Attempt{
		Number: a.Number, RunId: a.RunID, Status: string(a.Status), Outcome: a.Outcome, Summary: a.Summary,
		Reason: string(a.Reason), Message: a.Message, StartedUnixNano: nanos(a.StartedAt), EndedUnixNano: nanos(a.EndedAt),
		ExitCode: int32(a.ExitCode), ExitSignal: a.ExitSignal, StderrTail: a.StderrTail,
	}
}

// trees is a Tasks that also reads task trees.
type trees interface {
	Tree(ctx context.Context, principal, id string) ([]store.Task, error)
}

// modelUsages is a Tasks that also accounts its tasks' model calls.
type modelUsages interface {
	TaskModelUsage(ctx context.Context, principal, id string) (store.ModelUsage, map[int64]store.ModelUsage, error)
}

func usagePB(u store.ModelUsage) *apipb.ModelUsage {
	return &apipb.ModelUsage{Calls: u.Calls, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, DurationMs: u.Millis}
}

func eventPB(e store.Event) *apipb.Event {
	return &apipb.Event{Seq: e.Seq, TaskId: e.TaskID, RunId: e.RunID, Type: e.Type, TimeUnixNano: nanos(e.Time), Payload: e.Payload}
}

func approvalPB(a store.Approval) *apipb.Approval {
	kind, tool := host.ApprovalKind(a), a.Tool
	if kind != host.ApprovalKindTool {
		tool = ""
	}
	v := &apipb.Approval{
		Id: a.ID, TaskId: a.TaskID, RunId: a.RunID, Attempt: a.Attempt, Tool: tool, Prompt: a.Prompt,
		Status: string(a.Status), CreatedUnixNano: nanos(a.CreatedAt), ExpiresUnixNano: nanos(a.ExpiresAt),
		ResolvedUnixNano: nanos(a.ResolvedAt), Kind: kind, Fingerprint: a.Fingerprint,
	}
	if a.Status == store.ApprovalApproved {
		v.Scope, v.Pattern = string(a.Scope), a.Pattern
	}
	return v
}
