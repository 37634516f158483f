package host

import "context"

// Description is what an executor reports about itself (DESIGN §4).
type Description struct {
	Kind              string
	Version           string
	ProtocolVersion   int
	CheckpointSchemas []string
	Capabilities      []string
	Runtime           map[string]string
}

// accepts reports whether the executor takes checkpoints of schema.
func (d Description) accepts(schema string) bool {
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
}

// StepSummary is one completed step's summary.
type StepSummary struct {
	Step    int64
	Summary string
}

// StepRequest carries only what DESIGN §4 allows an executor to see.
type StepRequest struct {
	TaskID     string
	RunID      int64
	Attempt    int64
	TurnToken  string
	Spec       []byte
	Recent     []StepSummary
	Checkpoint *Checkpoint
	Remaining  Budgets
	Limits     Budgets
	// Indeterminate lists effects that were dispatching when an earlier
	// attempt of this step died (DESIGN §6).
	Indeterminate []Effect
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

// Outcome is the kind of a step result.
type Outcome string

const (
	OutcomeContinue Outcome = "continue"
	OutcomeComplete Outcome = "complete"
	OutcomeFail     Outcome = "fail"
)

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
	Launch(ctx context.Context, kind string, services ServicesServer) (Executor, error)
	// Describe is the description recorded when kind was registered, or an
	// error saying why kind is unavailable.
	Describe(kind string) (Description, error)
}
