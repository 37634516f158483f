package plugin

import (
	"context"
	"fmt"

	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/tools"
)

// Description is what an executor reports about itself (DESIGN §4).
type Description struct {
	Kind              string
	Version           string
	ProtocolVersion   int
	CheckpointSchemas []string
	Capabilities      []string
	Runtime           map[string]string
}

// Accepts reports whether the executor takes checkpoints of schema.
func (d Description) Accepts(schema string) bool {
	for _, s := range d.CheckpointSchemas {
		if s == schema {
			return true
		}
	}
	return false
}

// Budgets is the coarse budget view sent to an executor.
type Budgets struct {
	Steps, ToolCalls, ModelCalls, Depth, WallSeconds int64
	ModelTokens, OutputBytes                         int64
}

// Summary is the summary of one completed step (sdk.Summary on the
// executor's side).
type Summary struct {
	Step int64
	Text string
}

// StepRequest carries only what DESIGN §4 allows an executor to see.
type StepRequest struct {
	TaskID     string
	RunID      int64
	Attempt    int64
	TurnToken  string
	Spec       []byte
	Recent     []Summary
	Checkpoint *Checkpoint
	Remaining  Budgets
	Limits     Budgets
	// SummaryChars is the host's bound of a step summary ([limits]
	// summary_chars).
	SummaryChars int
	// Indeterminate lists effects that were dispatching when an earlier
	// attempt of this step died (DESIGN §6).
	Indeterminate []Effect
	// ModelPromptTokens is the most prompt tokens a model request may hold
	// (context_tokens less max_tokens); 0 when unknown.
	ModelPromptTokens int64
	// Children are the task's child tasks, oldest first (bounded by the
	// host: 64, each result cut to 1000 characters).
	Children []ChildTask
}

// ChildTask is one child task as its parent's step sees it.
type ChildTask struct {
	TaskID, Status, Reason string
	Result                 string // completed children's result, cut
}

// Effect is a ledger entry as an executor sees it: digests and a redacted
// summary, never a payload.
type Effect struct {
	Attempt, Seq   int64
	Kind           string
	Fingerprint    string
	IdempotencyKey string
	Status         string
	Summary        string
}

// Checkpoint is an executor's opaque state as the host handles it.
type Checkpoint struct {
	Schema  string
	Payload []byte
}

// Outcome is the kind of a step result, as sdk.Outcome on the executor's
// side; the zero value is no result (a step that crashed or was cut off).
type Outcome int

const (
	OutcomeContinue Outcome = iota + 1
	OutcomeComplete
	OutcomeFail
)

// String is the outcome as the store and the events record it: "continue",
// "complete" or "fail", and "" for no result.
func (o Outcome) String() string {
	switch o {
	case OutcomeContinue:
		return "continue"
	case OutcomeComplete:
		return "complete"
	case OutcomeFail:
		return "fail"
	case 0:
		return ""
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// StepResult is an executor's typed answer to one step.
type StepResult struct {
	Outcome    Outcome
	Summary    string
	Result     []byte
	Checkpoint *Checkpoint
	Reason     string // OutcomeFail: the executor's reason code
	Message    string // OutcomeFail
}

// Executor is the seam: one running executor process serving one task. The
// Runner knows this interface and nothing about any particular executor.
type Executor interface {
	Describe(ctx context.Context) (Description, error)
	// Step runs one step; cancelling ctx cancels it inside the plugin.
	Step(ctx context.Context, req StepRequest) (StepResult, error)
	// Exited is closed once the executor's process is gone.
	Exited() <-chan struct{}
	// ExitStatus is valid once Exited is closed.
	ExitStatus() ExitStatus
	// StderrTail is the last bounded lines the process wrote to stderr.
	StderrTail() string
	// Stop ends the process: a grace period, then the whole process group is
	// killed. It is safe to call more than once.
	Stop()
}

// Launcher starts executor processes.
type Launcher interface {
	// Launch starts a process of the executor kind that serves services to
	// it for the lifetime of the process.
	Launch(ctx context.Context, kind string, services Services) (Executor, error)
	// Describe is the description recorded when kind was registered, or an
	// error saying why kind is unavailable.
	Describe(kind string) (Description, error)
}

// Services is what the host serves one executor process besides its steps,
// each call for the step in flight its turn token names. A refusal is one of
// the typed errors of errors.go; a Launcher carries the calls over the wire
// and maps those errors to the wire's codes.
type Services interface {
	Progress(ctx context.Context, turnToken, note string) error
	ListTools(ctx context.Context, turnToken string) ([]tools.Spec, error)
	CallModel(ctx context.Context, call ModelCall) (ModelAnswer, error)
	CallTool(ctx context.Context, call ToolCall) (ToolAnswer, error)
	// RequestApproval returns once a person approved; a refusal fails the
	// task and returns an *ApprovalRefusedError.
	RequestApproval(ctx context.Context, turnToken, prompt string) error
	// RequestInput returns the JSON value the question was answered with.
	RequestInput(ctx context.Context, turnToken, question string) (valueJSON []byte, err error)
	// AbandonEffect gives up the task's unsettled tool effect (attempt,
	// seq): the gate no longer refuses the same call as its re-run.
	AbandonEffect(ctx context.Context, turnToken string, attempt, seq int64) error
}

// ModelCall is one model call of an executor. ParentCallToken is the token
// of the call whose answer led to this one ("" for a root call): the host,
// never the executor, derives the call's depth from it.
type ModelCall struct {
	TurnToken       string
	ParentCallToken string
	Messages        []model.Message
	Tools           []model.ToolSpec
}

// ModelAnswer is a model call's answer; CallToken names the call as the
// parent of the next.
type ModelAnswer struct {
	Message   model.Message
	CallToken string
	Depth     int64
	Replayed  bool // from the ledger of an earlier attempt of the step
	// FinishReason and Usage are the provider's (model.Response).
	FinishReason string
	Usage        model.Usage
}

// ToolCall is one tool call of an executor. Idempotent asks the tool to
// de-duplicate by IdempotencyKey, so that its retry after a crash needs no
// approval.
type ToolCall struct {
	TurnToken      string
	Name           string
	Arguments      []byte // a JSON object
	IdempotencyKey string
	Idempotent     bool
}

// ToolAnswer is a tool's result (tools.Result) as the executor sees it.
type ToolAnswer struct {
	Output   string
	IsError  bool
	Replayed bool
}

// NoServices serves an executor nothing: every call is refused with
// ErrNotConfigured. It is for a process that is only described or measured.
type NoServices struct{}

var errNoServices = Refuse(ErrNotConfigured, "this executor process is served no host services")

func (NoServices) Progress(context.Context, string, string) error { return errNoServices }
func (NoServices) ListTools(context.Context, string) ([]tools.Spec, error) {
	return nil, errNoServices
}
func (NoServices) CallModel(context.Context, ModelCall) (ModelAnswer, error) {
	return ModelAnswer{}, errNoServices
}
func (NoServices) CallTool(context.Context, ToolCall) (ToolAnswer, error) {
	return ToolAnswer{}, errNoServices
}
func (NoServices) RequestApproval(context.Context, string, string) error { return errNoServices }
func (NoServices) RequestInput(context.Context, string, string) ([]byte, error) {
	return nil, errNoServices
}
func (NoServices) AbandonEffect(context.Context, string, int64, int64) error { return errNoServices }
