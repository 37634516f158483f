package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/taskhost/taskhost/internal/text"
)

// Executor is what an executor author implements. One plugin process serves
// one running task; Step is called once per step, never concurrently.
type Executor interface {
	// Describe reports what the executor is. It must be constant, and cheap
	// once an Identifier's start-up work is done.
	Describe() Description
	// Step runs one step. ctx is cancelled when the host cancels the task or
	// stops the run: return promptly (ctx.Err() is fine) and stop every effect
	// you started. A returned error is reported as an executor failure.
	Step(ctx context.Context, host Host, req StepRequest) (StepResult, error)
}

// Identifier is implemented by an executor whose Describe waits for
// start-up work of its own, such as a runtime's preflight, so that the work
// overlaps the plugin's handshake with the host. Serve then validates
// Identity instead of calling Describe before the handshake; the host's
// first Describe call waits for the work, and a Describe that reports a
// failed preflight keeps every step from being sent.
type Identifier interface {
	Identity() (kind, version string)
}

// Description is an executor's identity and capabilities.
type Description struct {
	Kind    string // e.g. "legacy"; lowercase letters, digits, '-' and '_'
	Version string // the executor's own version, e.g. "1.2.0"
	// CheckpointSchemas lists every checkpoint schema Step accepts, newest
	// first. A task whose checkpoint has another schema fails closed.
	CheckpointSchemas []string
	Capabilities      []string
	Runtime           map[string]string // facts such as a runtime's version
}

// Budgets is a coarse view of a task's budgets (limits or what remains).
type Budgets struct {
	Steps       int64
	ToolCalls   int64
	ModelCalls  int64
	Depth       int64
	WallSeconds int64
	// ModelTokens are prompt + completion tokens of answered model calls
	// (the host estimates 4 bytes a token when the provider reports none).
	ModelTokens int64
	// OutputBytes are the bytes the host hands back from effects: model
	// replies (content and tool-call arguments) and tool outputs.
	OutputBytes int64
}

// Summary is the summary of one completed step.
type Summary struct {
	Step int64
	Text string
}

// Checkpoint is an executor's own state between steps. The host stores only
// the latest one, bounded, and never looks inside Payload.
type Checkpoint struct {
	Schema  string
	Payload []byte
}

// Effect is a ledger entry of a model, tool or approval effect.
type Effect struct {
	Attempt        int64
	Seq            int64
	Kind           string // "model", "tool", "approval"
	Fingerprint    string
	IdempotencyKey string
	Status         string
	Summary        string
}

// StepRequest is everything the executor learns about a task for one step.
type StepRequest struct {
	TaskID  string
	RunID   int64
	Attempt int64
	// Spec is the task spec as its creator gave it: JSON with at least "goal".
	Spec []byte
	// Recent holds the most recent completed step summaries, oldest first.
	Recent []Summary
	// Checkpoint is nil on a task's first step.
	Checkpoint *Checkpoint
	Remaining  Budgets
	Limits     Budgets
	// SummaryChars is the host's bound of a step summary, in characters
	// ([limits] summary_chars): the host cuts a longer one. 0 from a host
	// older than this field.
	SummaryChars int
	// Indeterminate lists the task's unsettled effects: every tool effect
	// an earlier attempt (any run, any host) left in flight or observed
	// without a kept result and that nobody has resolved yet, and model and
	// approval effects left in flight since the last completed step; at
	// most 100, oldest first. Do not re-run a non-idempotent one on your
	// own (the host refuses it: ErrEffectUnsettled): treat it as failed,
	// ask for an approval to retry, or AbandonEffect.
	Indeterminate []Effect
	// ModelPromptTokens is the most prompt tokens a model request of this
	// task may hold: the host's [model] context_tokens less the reply's
	// max_tokens. 0 when the host does not know. Tokens are the server's;
	// an executor estimates them (ModelResponse.Usage.PromptTokens tells
	// how the last request counted).
	ModelPromptTokens int64
	// Children are the task's child tasks (Delegate), oldest first: at
	// most 64, each result cut to 1000 characters.
	Children []ChildTask
}

// Outcome is the kind of a step's result.
type Outcome int

const (
	OutcomeContinue Outcome = iota + 1
	OutcomeComplete
	OutcomeFail
)

func (o Outcome) String() string {
	switch o {
	case OutcomeContinue:
		return "continue"
	case OutcomeComplete:
		return "complete"
	case OutcomeFail:
		return "fail"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// StepResult is a step's typed outcome. Build it with Continue, Complete or
// Fail.
type StepResult struct {
	Outcome    Outcome
	Summary    string
	Result     []byte      // Complete only
	Checkpoint *Checkpoint // nil keeps the previous checkpoint
	Reason     string      // Fail only: a reason code such as "no_progress"
	Message    string      // Fail only
}

// Continue ends the step with more work to do.
func Continue(summary string, cp *Checkpoint) StepResult {
	return StepResult{Outcome: OutcomeContinue, Summary: summary, Checkpoint: cp}
}

// Complete ends the task successfully with result.
func Complete(summary string, result []byte, cp *Checkpoint) StepResult {
	return StepResult{Outcome: OutcomeComplete, Summary: summary, Result: result, Checkpoint: cp}
}

// Fail ends the task as failed. reason is a reason code; the host maps codes
// it does not know to "executor_failed".
func Fail(reason, message string) StepResult {
	return StepResult{Outcome: OutcomeFail, Reason: reason, Message: message}
}

// Host is the executor's only way to the outside world. Every call is counted
// against the task's budgets, gated and recorded by the host, and cancelled
// with ctx.
type Host interface {
	CallModel(ctx context.Context, req ModelRequest) (ModelResponse, error)
	CallTool(ctx context.Context, req ToolRequest) (ToolResponse, error)
	RequestApproval(ctx context.Context, prompt string) (Decision, error)
	// RequestInput asks the task's principal a question and returns the
	// JSON value they answer with (`taskhost approve ID --value JSON`;
	// "null" when they approve without one). The task waits in
	// waiting_approval meanwhile; a rejection fails the task, and the call
	// returns an error. Ask from the step that needs the answer: once
	// answered, a re-run of the same step (after a crash) gets the same
	// value without asking again; a question whose wait a crash cut off
	// is asked again. The question is cut to 500 characters.
	RequestInput(ctx context.Context, question string) (json.RawMessage, error)
	// Progress reports a short note that becomes a task event.
	Progress(ctx context.Context, note string) error
	// Tools lists the tools the task may call, to offer to a model.
	Tools(ctx context.Context) ([]ToolSpec, error)
	// AbandonEffect gives up an unsettled tool effect the step was told of
	// (StepRequest.Indeterminate, by its Attempt and Seq): the host stops
	// refusing the same call as a re-run of it (ErrEffectUnsettled), and
	// records who gave it up. A call issued afterwards is a new call under
	// its tool's policy: an approval where the policy asks one, none where
	// it asks none — abandon only what the executor will not repeat, or
	// has checked did not happen. An effect that is not unsettled (or no
	// longer) is ErrInvalidArgument; a host older than the call answers
	// ErrUnimplemented.
	AbandonEffect(ctx context.Context, e Effect) error
	// Delegate creates a child task of this task and returns its id. The
	// child waits in the queue; when this step ends while a child has not
	// ended, the task is blocked (waiting_children) until its children
	// end, and its next step sees them in StepRequest.Children. The
	// child's budgets come out of what this task has left. A refusal is a
	// *DelegateError. It is the tool task.delegate (docs/tools.md).
	Delegate(ctx context.Context, req DelegateRequest) (string, error)
}

// Message is one chat message.
type Message struct {
	Role       string // "system", "user", "assistant", "tool"
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
}

// ToolCall is a model's request to call a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON
}

// ToolSpec describes a tool offered to the model.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  string // JSON schema
}

// ModelRequest is one model call.
type ModelRequest struct {
	Messages []Message
	Tools    []ToolSpec
	// ParentCallToken is the CallToken of the model call this one recurses
	// from, or empty at the root. The host computes the depth from it.
	ParentCallToken string
}

// ModelResponse is a model's reply.
type ModelResponse struct {
	Message   Message
	CallToken string
	Depth     int64
	Replayed  bool // served from the ledger of a re-run step
	// FinishReason is why the model stopped: FinishLength means the reply
	// was cut at the output limit (max_tokens) or the context's end and
	// may be incomplete. "" when the endpoint did not say.
	FinishReason string
	Usage        ModelUsage
}

// FinishLength is the FinishReason of a reply cut at the output limit.
const FinishLength = "length"

// ModelUsage is what one model call cost: tokens as the endpoint reported
// them (0 when it did not), the duration as the host measured it.
type ModelUsage struct {
	PromptTokens     int64
	CompletionTokens int64
	DurationMillis   int64
}

// ToolRequest is one tool call.
type ToolRequest struct {
	Name      string
	Arguments string // JSON
	// IdempotencyKey names the effect; the host records it and hands it
	// back in StepRequest.Indeterminate.
	IdempotencyKey string
	// Idempotent asks the tool to de-duplicate the call by IdempotencyKey
	// (required, at most 128 bytes): a call repeated with the same key has
	// the effect of one, so after a crash the host re-admits it without an
	// approval. Only a tool that honours a key accepts it (workspace.write:
	// an append included); on any other the call fails with
	// ErrInvalidArgument.
	Idempotent bool
}

// ToolResponse is a tool's result.
type ToolResponse struct {
	Result   string // JSON
	IsError  bool
	Replayed bool
}

// ForModel is the tool message a model reads of r: the result cut to at
// most maxBytes (never inside a rune, "\n[output truncated]" after a
// cut), prefixed "error: " when the tool reported an error. An executor
// that runs a model's tool calls feeds this back, so that one verbose
// tool cannot make the next request too large for the host.
func (r ToolResponse) ForModel(maxBytes int) string {
	content := r.Result
	if len(content) > maxBytes {
		content = text.Truncate(content, maxBytes) + "\n[output truncated]"
	}
	if r.IsError {
		content = "error: " + content
	}
	return content
}

// Decision is the answer to an approval request.
type Decision string

const (
	Approved Decision = "approved"
	Rejected Decision = "rejected"
)

// Errors a Host call may return; match them with errors.Is.
var (
	ErrUnimplemented    = errors.New("host service not implemented")
	ErrPermissionDenied = errors.New("permission denied")
	ErrBudgetExhausted  = errors.New("budget exhausted")
	ErrInvalidArgument  = errors.New("invalid argument")
	ErrHostUnavailable  = errors.New("host unavailable")
	// ErrModelUnavailable: the host is there but its model provider is not
	// (a transport error, a timeout, 5xx or 429 after the host's own
	// retries). Nothing was charged twice; the call may be retried later,
	// or the step failed with reason "model_unavailable".
	ErrModelUnavailable = errors.New("model unavailable")
	// ErrEffectUnsettled: the call would run again a tool effect an
	// earlier attempt of the task (any run, any host) left unsettled
	// (indeterminate, or observed with a result too large to replay), which
	// is not resolved yet. Nothing ran. The same call is refused until its
	// retry is approved (RequestApproval in a step that lists it) or it is
	// abandoned (AbandonEffect, or an operator); or treat it as failed.
	ErrEffectUnsettled = errors.New("effect unsettled: its retry needs an approval")
)

// Host error reasons: the google.rpc.ErrorInfo reasons a host service sets
// on a status whose code alone does not say what happened.
const (
	ReasonModelUnavailable = "MODEL_UNAVAILABLE"
	// ReasonModelFailed: the model provider failed the call for good
	// (auth, request, bad_response); the ErrorInfo's "kind" names which.
	ReasonModelFailed     = "MODEL_FAILED"
	ReasonEffectUnsettled = "EFFECT_UNSETTLED"
)

// HostError is an error from a Host call. It matches one of the Err values
// above through errors.Is.
type HostError struct {
	Kind    error
	Message string
}

func (e *HostError) Error() string { return fmt.Sprintf("%v: %s", e.Kind, e.Message) }

func (e *HostError) Unwrap() error { return e.Kind }

// HostErrorKind names which of the Err values above err matches —
// "unimplemented", "permission_denied", "budget_exhausted",
// "invalid_argument", "model_unavailable", "model_error" (a [*ModelError]
// that is not transient), "effect_unsettled" or "host_unavailable" — or ""
// for none. It is a stable
// code an executor may log or hand to its own runtime, where the error's
// message must not go.
func HostErrorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{ErrUnimplemented, "unimplemented"},
		{ErrPermissionDenied, "permission_denied"},
		{ErrBudgetExhausted, "budget_exhausted"},
		{ErrInvalidArgument, "invalid_argument"},
		{ErrModelUnavailable, "model_unavailable"},
		{ErrEffectUnsettled, "effect_unsettled"},
		{ErrHostUnavailable, "host_unavailable"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	if _, ok := errors.AsType[*ModelError](err); ok {
		return "model_error"
	}
	return ""
}

// ChildTask is one child task as its parent's step sees it
// (StepRequest.Children).
type ChildTask struct {
	TaskID string
	Status string // pending, running, blocked, completed, failed, ...
	Reason string
	// Result is a completed child's result, cut to 1000 characters.
	Result string
}

// DelegateRequest is a child task to delegate (Host.Delegate). Zero
// budgets take the host's default share of what the parent has left.
type DelegateRequest struct {
	Goal string
	// Executor is the child's executor kind; "" is the parent's.
	Executor string
	// Options are the child's executor options (a JSON object), merged
	// into its spec beside the goal; nil for none.
	Options                                         json.RawMessage
	MaxSteps, MaxToolCalls, MaxModelCalls, MaxDepth int64
	MaxWallSeconds                                  int64
	MaxModelTokens, MaxOutputBytes                  int64
}

// DelegateError is a delegation the host refused (outside the tree's
// bounds, more budget than the parent has left, a bad argument): Code is
// the typed code of docs/tools.md ("tree_limit", "invalid_argument", ...).
type DelegateError struct {
	Code    string
	Message string
}

func (e *DelegateError) Error() string { return "delegate: " + e.Code + ": " + e.Message }

// ToolTaskDelegate is the host tool Host.Delegate calls.
const ToolTaskDelegate = "task.delegate"

// ToolCaller is the part of a Host Delegate needs.
type ToolCaller interface {
	CallTool(ctx context.Context, req ToolRequest) (ToolResponse, error)
}

// DelegateVia delegates through the host's task.delegate tool, so a
// delegation is an effect of the ledger like any tool call: budgeted,
// approval-gated by its policy, and replayed, not repeated, when a crashed
// step is run again.
func DelegateVia(ctx context.Context, h ToolCaller, req DelegateRequest) (string, error) {
	args := map[string]any{"goal": req.Goal}
	if req.Executor != "" {
		args["executor"] = req.Executor
	}
	if len(req.Options) > 0 {
		args["options"] = req.Options
	}
	for k, v := range map[string]int64{"max_steps": req.MaxSteps, "max_tool_calls": req.MaxToolCalls,
		"max_model_calls": req.MaxModelCalls, "max_depth": req.MaxDepth, "max_wall_seconds": req.MaxWallSeconds,
		"max_model_tokens": req.MaxModelTokens, "max_output_bytes": req.MaxOutputBytes} {
		if v != 0 {
			args[k] = v
		}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	res, err := h.CallTool(ctx, ToolRequest{Name: ToolTaskDelegate, Arguments: string(raw)})
	if err != nil {
		return "", err
	}
	var out struct {
		TaskID string `json:"task_id"`
		Error  struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(res.Result), &out); err != nil {
		return "", fmt.Errorf("delegate: the host's answer is not readable: %w", err)
	}
	if res.IsError || out.TaskID == "" {
		return "", &DelegateError{Code: out.Error.Code, Message: out.Error.Message}
	}
	return out.TaskID, nil
}
