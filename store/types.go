package store

import (
	"strconv"
	"time"
)

// Status is a task's lifecycle state (DESIGN §2).
type Status string

const (
	StatusPending         Status = "pending"
	StatusRunning         Status = "running"
	StatusWaitingApproval Status = "waiting_approval"
	StatusCompleted       Status = "completed"
	StatusFailed          Status = "failed"
	StatusCancelled       Status = "cancelled"
	StatusInterrupted     Status = "interrupted"
	// StatusBlocked: a parent task waits for its child tasks (reason
	// waiting_children) and holds no run and no concurrency slot.
	StatusBlocked Status = "blocked"
)

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// legalFrom lists, for each target status, the statuses it may be entered
// from. It is the whole state machine of DESIGN §2.
var legalFrom = map[Status][]Status{
	// A resume beyond the host's free slots queues the task again.
	// A woken parent (its children all completed) queues too.
	StatusPending:         {StatusInterrupted, StatusBlocked},
	StatusRunning:         {StatusPending, StatusWaitingApproval, StatusInterrupted},
	StatusWaitingApproval: {StatusRunning},
	StatusCompleted:       {StatusRunning},
	// A blocked parent fails when a child fails (child_failed).
	StatusFailed:    {StatusRunning, StatusWaitingApproval, StatusBlocked},
	StatusCancelled: {StatusPending, StatusRunning, StatusWaitingApproval, StatusInterrupted, StatusBlocked},
	// A pause takes a queued task out of the queue.
	StatusInterrupted: {StatusRunning, StatusWaitingApproval, StatusPending, StatusBlocked},
	// A parent ends its step with children still live, or is resumed
	// while they are.
	StatusBlocked: {StatusRunning, StatusInterrupted},
}

// Legal reports whether from → to is a transition of the state machine.
func Legal(from, to Status) bool {
	for _, f := range legalFrom[to] {
		if f == from {
			return true
		}
	}
	return false
}

// Reason is the typed code that explains a task's or attempt's outcome. It is
// a closed set: never free text from a model.
type Reason string

const (
	ReasonNone                   Reason = ""
	ReasonStepBudgetExhausted    Reason = "step_budget_exhausted"
	ReasonToolBudgetExhausted    Reason = "tool_budget_exhausted"
	ReasonModelBudgetExhausted   Reason = "model_budget_exhausted"
	ReasonDepthBudgetExhausted   Reason = "depth_budget_exhausted"
	ReasonWallClockExceeded      Reason = "wall_clock_exceeded"
	ReasonExecutorFailed         Reason = "executor_failed"
	ReasonExecutorCrashed        Reason = "executor_crashed"
	ReasonExecutorUnavailable    Reason = "executor_unavailable"
	ReasonApprovalRejected       Reason = "approval_rejected"
	ReasonApprovalTimeout        Reason = "approval_timeout"
	ReasonCheckpointIncompatible Reason = "checkpoint_incompatible"
	ReasonCheckpointTooLarge     Reason = "checkpoint_too_large"
	ReasonResultTooLarge         Reason = "result_too_large"
	ReasonEffectIndeterminate    Reason = "effect_indeterminate"
	ReasonHostShutdown           Reason = "host_shutdown"
	ReasonHostRestart            Reason = "host_restart"
	ReasonUserCancelled          Reason = "user_cancelled"
	ReasonNoProgress             Reason = "no_progress"
	ReasonStoreError             Reason = "store_error"
	// ReasonModelUnavailable: a step gave up on the model provider (no
	// answer, or 429/5xx after retries); the task is interrupted and may
	// be resumed once the provider is back.
	ReasonModelUnavailable Reason = "model_unavailable"
	// ReasonModelAuth: the model endpoint refused the credentials (HTTP
	// 401 or 403); the same key fails the same way, so the task fails.
	ReasonModelAuth Reason = "model_auth"
	// ReasonHostLost: the host that ran the task stopped heartbeating for
	// longer than its lease; another host of the fleet interrupted the task.
	ReasonHostLost Reason = "host_lost"
	// ReasonRunLost: the task's own host found it live in the store with
	// no run of the host's holding it — a write whose acknowledgement was
	// lost with the store's connection left it so — and interrupted it.
	ReasonRunLost Reason = "run_lost"
	// ReasonUserPause: the principal paused the task (task pause, or
	// pause --all); it is interrupted and resumes explicitly.
	ReasonUserPause Reason = "user_pause"
	// ReasonUserStopAll: the principal cancelled all of their tasks at
	// once (task cancel --all).
	ReasonUserStopAll Reason = "user_stop_all"
	// ReasonModelBadReply: the model's replies could not be used (the
	// server could not parse them, or they were over the host's bounds)
	// even after the executor told the model so; the task fails.
	ReasonModelBadReply Reason = "model_bad_reply"
	// ReasonModelContextExceeded: a model request did not fit the model's
	// context even cut to [model] context_tokens; the task is interrupted
	// and may be resumed once the server's context or the setting is
	// fixed.
	ReasonModelContextExceeded Reason = "model_context_exceeded"
	// ReasonWaitingChildren: the task is blocked until its child tasks
	// (task.delegate) have ended.
	ReasonWaitingChildren Reason = "waiting_children"
	// ReasonChildFailed: a child task failed, was cancelled or was
	// interrupted (other than with its whole tree) while its parent
	// waited: the parent fails.
	ReasonChildFailed Reason = "child_failed"
	// ReasonParentEnded: the task's parent ended (failed, was cancelled,
	// or completed) while the task was live: the task is cancelled.
	ReasonParentEnded Reason = "parent_ended"
	// ReasonTokenBudgetExhausted: the task's model calls used
	// max_model_tokens (prompt + completion, as reported or estimated).
	ReasonTokenBudgetExhausted Reason = "token_budget_exhausted"
	// ReasonOutputBudgetExhausted: the bytes the task's effects handed
	// back to its executor reached max_output_bytes.
	ReasonOutputBudgetExhausted Reason = "output_budget_exhausted"
	// ReasonWorkspaceTooLarge: at a step's end the task's workspace was
	// past a limit of the stored workspace (Limits.WorkspaceBytes or
	// WorkspaceFiles); nothing of the step was stored.
	ReasonWorkspaceTooLarge Reason = "workspace_too_large"
)

var reasons = map[Reason]bool{
	ReasonNone: true, ReasonStepBudgetExhausted: true, ReasonToolBudgetExhausted: true,
	ReasonModelBudgetExhausted: true, ReasonDepthBudgetExhausted: true, ReasonWallClockExceeded: true,
	ReasonExecutorFailed: true, ReasonExecutorCrashed: true, ReasonExecutorUnavailable: true,
	ReasonApprovalRejected: true, ReasonApprovalTimeout: true, ReasonCheckpointIncompatible: true,
	ReasonCheckpointTooLarge: true, ReasonResultTooLarge: true, ReasonEffectIndeterminate: true,
	ReasonHostShutdown: true, ReasonHostRestart: true, ReasonUserCancelled: true,
	ReasonNoProgress: true, ReasonStoreError: true, ReasonModelUnavailable: true, ReasonModelAuth: true,
	ReasonHostLost: true, ReasonRunLost: true, ReasonUserPause: true, ReasonUserStopAll: true,
	ReasonModelBadReply: true, ReasonModelContextExceeded: true,
	ReasonWaitingChildren: true, ReasonChildFailed: true, ReasonParentEnded: true,
	ReasonTokenBudgetExhausted: true, ReasonOutputBudgetExhausted: true, ReasonWorkspaceTooLarge: true,
}

// Valid reports whether r is one of the closed set of reason codes.
func (r Reason) Valid() bool { return reasons[r] }

// Budget is one bounded counter: its fixed limit and what has been used.
type Budget struct {
	Limit int64
	Used  int64
}

// Remaining is Limit − Used, never below zero.
func (b Budget) Remaining() int64 { return max(b.Limit-b.Used, 0) }

// BudgetKind names one of a task's seven budgets. Its String is the budget's
// label in errors, metrics and the CLI ("steps", "tool_calls", ...); its
// Reason is the reason a task ends with when that budget runs out. The zero
// value names no budget.
type BudgetKind int

const (
	BudgetSteps BudgetKind = iota + 1
	BudgetToolCalls
	BudgetModelCalls
	BudgetDepth
	BudgetWall
	// BudgetModelTokens counts the prompt and completion tokens of the
	// task's answered model calls.
	BudgetModelTokens
	// BudgetOutputBytes counts the bytes the task's effects handed back
	// to its executor: model replies and tool outputs.
	BudgetOutputBytes
)

// BudgetKinds are the seven budgets: DESIGN §3's five in its order, then
// the token and output budgets.
func BudgetKinds() []BudgetKind {
	return []BudgetKind{BudgetSteps, BudgetToolCalls, BudgetModelCalls, BudgetDepth, BudgetWall, BudgetModelTokens, BudgetOutputBytes}
}

var budgetNames = [...]string{BudgetSteps: "steps", BudgetToolCalls: "tool_calls",
	BudgetModelCalls: "model_calls", BudgetDepth: "depth", BudgetWall: "wall",
	BudgetModelTokens: "model_tokens", BudgetOutputBytes: "output_bytes"}

var budgetReasons = [...]Reason{BudgetSteps: ReasonStepBudgetExhausted, BudgetToolCalls: ReasonToolBudgetExhausted,
	BudgetModelCalls: ReasonModelBudgetExhausted, BudgetDepth: ReasonDepthBudgetExhausted, BudgetWall: ReasonWallClockExceeded,
	BudgetModelTokens: ReasonTokenBudgetExhausted, BudgetOutputBytes: ReasonOutputBudgetExhausted}

func (k BudgetKind) valid() bool { return k >= BudgetSteps && k <= BudgetOutputBytes }

// String is the budget's label, or "BudgetKind(n)" for a value outside the set.
func (k BudgetKind) String() string {
	if !k.valid() {
		return "BudgetKind(" + strconv.Itoa(int(k)) + ")"
	}
	return budgetNames[k]
}

// Reason is the reason a task ends with when the budget runs out;
// ReasonNone for a value outside the set.
func (k BudgetKind) Reason() Reason {
	if !k.valid() {
		return ReasonNone
	}
	return budgetReasons[k]
}

// BudgetOf is the budget whose exhaustion r reports; false when r is not a
// budget reason.
func BudgetOf(r Reason) (BudgetKind, bool) {
	for _, k := range BudgetKinds() {
		if budgetReasons[k] == r {
			return k, true
		}
	}
	return 0, false
}

// Budgets are a task's budgets (DESIGN §3, and the token and output
// budgets). Depth.Used is the deepest call admitted so far; WallMillis
// counts active running time. ModelTokens and OutputBytes are charged as
// an effect is observed, in full, so their Used may pass Limit by the one
// call that crossed it (which then fails the task).
type Budgets struct {
	Steps       Budget
	ToolCalls   Budget
	ModelCalls  Budget
	Depth       Budget
	WallMillis  Budget
	ModelTokens Budget
	OutputBytes Budget
	// TokensEstimated counts the answered model calls whose tokens the
	// provider did not report, so the host estimated them:
	// ModelTokens.Used is then partly an estimate.
	TokensEstimated int64
}

// limits are the budgets in BudgetKinds order.
func (b Budgets) limits() []Budget {
	return []Budget{b.Steps, b.ToolCalls, b.ModelCalls, b.Depth, b.WallMillis, b.ModelTokens, b.OutputBytes}
}

// Task is one row of the tasks table.
type Task struct {
	Seq         int64 // creation order, monotonic
	ID          string
	PrincipalID string
	Executor    string
	Spec        []byte // JSON, bounded
	Status      Status
	Reason      Reason
	Message     string // host-written detail for Reason, bounded
	RunID       int64  // 0 until first start; +1 on every start and resume
	Budgets     Budgets
	Checkpoint  []byte // sealed envelope; opaque to the store; nil when none
	Result      []byte // nil until completed
	CreatedAt   time.Time
	UpdatedAt   time.Time

	// CheckpointAttempt is the attempt that wrote Checkpoint, 0 when none:
	// the host refuses an envelope sealed at any other attempt.
	CheckpointAttempt int64

	// ParentID is the task that delegated this one, "" for a root;
	// RootID is its tree's root ("" for a root); TreeDepth is 0 for a
	// root and the parent's + 1 for a child, computed by the store.
	ParentID  string
	RootID    string
	TreeDepth int64
}

// AttemptStatus is the state of one step attempt.
type AttemptStatus string

const (
	AttemptRunning     AttemptStatus = "running"
	AttemptCompleted   AttemptStatus = "completed"
	AttemptFailed      AttemptStatus = "failed"
	AttemptInterrupted AttemptStatus = "interrupted"
	AttemptCancelled   AttemptStatus = "cancelled"
)

// Attempt is one row of the attempts table, keyed (TaskID, Number).
type Attempt struct {
	TaskID     string
	Number     int64 // 1-based across the task's life
	RunID      int64
	Status     AttemptStatus
	Outcome    string // "continue", "complete", "fail" or "" when none
	Summary    string // bounded
	Reason     Reason
	Message    string // bounded
	StartedAt  time.Time
	EndedAt    time.Time // zero while running
	ExitCode   int       // -1 when unknown
	ExitSignal string    // e.g. "killed"; "" when none
	StderrTail string    // last bounded lines of the plugin's stderr, for crashes
}

// Event is one persisted task event (DESIGN §7).
type Event struct {
	Seq     int64
	TaskID  string
	RunID   int64
	Type    string
	Time    time.Time
	Payload []byte // JSON object, bounded
}

// NewEvent is an event to append in the same transaction as a state change.
type NewEvent struct {
	Type    string
	Payload []byte
}
