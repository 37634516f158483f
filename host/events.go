package host

import (
	"encoding/json"
	"fmt"

	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// Event types (DESIGN §7). The set is closed; payload fields are additive.
const (
	EventTaskCreated = "task.created"
	EventTaskStarted = "task.started"
	EventTaskResumed = "task.resumed"
	// EventTaskQueued: a resume found no free slot; the task waits,
	// pending, at the tail of the queue.
	EventTaskQueued          = "task.queued"
	EventStepStarted         = "step.started"
	EventStepCompleted       = "step.completed"
	EventStepInterrupted     = "step.interrupted"
	EventStepProgress        = "step.progress"
	EventTaskWaitingApproval = "task.waiting_approval"
	EventApprovalResolved    = "approval.resolved"
	// EventApprovalCovered: a gated tool call ran on an allow-for-task
	// approval (its id is the note) without asking.
	EventApprovalCovered = "approval.covered"
	EventTaskCompleted   = "task.completed"
	EventTaskFailed      = "task.failed"
	EventTaskCancelled   = "task.cancelled"
	EventTaskInterrupted = "task.interrupted"
	EventExecutorCrashed = "executor.crashed"
)

// maxProgressNote bounds the executor's own words in a progress event.
const maxProgressNote = 200

// EventPayload is the closed field set of an event. It never carries a
// prompt, a summary, tool arguments or results, credentials or executor state:
// only identifiers, typed codes and coarse counters.
type EventPayload struct {
	TaskID   string `json:"task_id"`
	RunID    int64  `json:"run_id"`
	Executor string `json:"executor"`
	Attempt  int64  `json:"attempt,omitempty"`
	Status   string `json:"status,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Exit     string `json:"exit,omitempty"`
	// Limit names the cgroup limit that ended a crashed executor's
	// process: "memory" or "processes" (executor.crashed,
	// step.interrupted, task.interrupted).
	Limit    string `json:"limit,omitempty"`
	Note     string `json:"note,omitempty"`
	Steps    string `json:"steps,omitempty"` // "used/limit"
	Tools    string `json:"tools,omitempty"`
	Models   string `json:"models,omitempty"`
	WallSecs string `json:"wall_s,omitempty"`
	// Tokens and Output are the token and output budgets, "used/limit";
	// TokensEstimated counts the calls whose tokens the host estimated.
	Tokens          string `json:"tokens,omitempty"`
	TokensEstimated int64  `json:"tokens_estimated,omitempty"`
	Output          string `json:"output_bytes,omitempty"`
	// By is the admin principal who acted on another principal's task.
	By string `json:"by,omitempty"`
	// What a step's model calls cost (step.completed, step.interrupted):
	// tokens as the endpoint reported them, and their duration.
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	ModelMillis      int64 `json:"model_ms,omitempty"`
}

func meter(b store.Budget) string { return fmt.Sprintf("%d/%d", b.Used, b.Limit) }

// newEvent builds an event of typ for t. t is the task as it is after the
// change the event reports.
func newEvent(typ string, t store.Task, p EventPayload) store.NewEvent {
	p.TaskID, p.RunID, p.Executor = t.ID, t.RunID, t.Executor
	if p.Status == "" {
		p.Status = string(t.Status)
	}
	b := t.Budgets
	p.Steps, p.Tools, p.Models = meter(b.Steps), meter(b.ToolCalls), meter(b.ModelCalls)
	p.WallSecs = fmt.Sprintf("%d/%d", b.WallMillis.Used/1000, b.WallMillis.Limit/1000)
	p.Tokens, p.TokensEstimated, p.Output = meter(b.ModelTokens), b.TokensEstimated, meter(b.OutputBytes)
	p.Note = text.Truncate(p.Note, maxProgressNote)
	data, _ := json.Marshal(p) // strings and ints only
	return store.NewEvent{Type: typ, Payload: data}
}
