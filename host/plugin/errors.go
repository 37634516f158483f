package plugin

import (
	"errors"
	"fmt"
)

// Refusals of the host services: why a progress note, model call, tool call,
// approval or input request of an executor's step was not run. They are
// plain Go errors, matched with errors.Is and errors.As; the gRPC adapter
// maps them to a status code and ErrorInfo reason in one place
// (serviceStatus), and nothing else in the host builds a status.
//
// A request field the host refuses is a *FieldError (ErrInvalid); a
// cancelled or timed-out call is its context's error; a store that refused
// the write is ErrNotRecorded.
var (
	// ErrNotAllowed: the call names what its step was not given — a turn
	// token of another task or of a step no longer in flight, a parent
	// call token the step was not issued.
	ErrNotAllowed = errors.New("not allowed for this step")
	// ErrNotConfigured: the host has no model provider, or no tools.
	ErrNotConfigured = errors.New("not configured on this host")
	// ErrUnknownTool: the tool is unknown or disabled.
	ErrUnknownTool = errors.New("unknown or disabled tool")
	// ErrStepEnded: the step's attempt is no longer the task's current
	// one; nothing it asks for is recorded.
	ErrStepEnded = errors.New("the step is no longer running")
	// ErrNotRecorded: the store did not record the note or effect.
	ErrNotRecorded = errors.New("not recorded")
	// ErrEffectUnsettled matches an *UnsettledEffectError.
	ErrEffectUnsettled = errors.New("effect unsettled")
	// ErrBudgetExhausted matches a *BudgetError.
	ErrBudgetExhausted = errors.New("budget exhausted")
	// ErrModelUnavailable matches a *ModelError of an outage (rate
	// limited, server error, timeout): a later call may succeed.
	ErrModelUnavailable = errors.New("model unavailable")
	// ErrModelFailed matches a *ModelError that a retry does not fix.
	ErrModelFailed = errors.New("model failed")
	// ErrToolFailed matches a *ToolError.
	ErrToolFailed = errors.New("tool failed")
	// ErrApprovalRefused matches an *ApprovalRefusedError.
	ErrApprovalRefused = errors.New("approval refused")
	// ErrInvalid matches a *FieldError.
	ErrInvalid = errors.New("invalid request")
)

// FieldError is a refused request field. It matches ErrInvalid; the
// Runner refuses its own requests' fields with it too.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string   { return e.Field + ": " + e.Message }
func (e *FieldError) Is(t error) bool { return t == ErrInvalid }

// refusal is a sentinel with the words of one occasion: the message says
// what was refused, errors.Is tells which kind.
type refusal struct {
	kind error
	msg  string
}

func (e *refusal) Error() string   { return e.msg }
func (e *refusal) Is(t error) bool { return t == e.kind }

// Refuse is a refusal of kind (one of the sentinels above) in the words of
// one occasion: errors.Is(err, kind) holds, and the message is the format's.
func Refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// UnsettledEffectError refuses to run an effect again that an earlier
// attempt of the task left unsettled (it may already have happened) until
// the effect is resolved: its retry approved, or it abandoned. It matches
// ErrEffectUnsettled.
type UnsettledEffectError struct {
	Effect Effect // the earlier attempt's ledger entry
}

func (e *UnsettledEffectError) Error() string {
	return fmt.Sprintf("%s effect %d of attempt %d (%s) is %s: it may already have happened, and it runs again only once resolved: its retry approved (RequestApproval in a step that lists it) or it abandoned (AbandonEffect)",
		e.Effect.Kind, e.Effect.Seq, e.Effect.Attempt, e.Effect.Summary, e.Effect.Status)
}
func (e *UnsettledEffectError) Is(t error) bool { return t == ErrEffectUnsettled }

// BudgetError refuses an effect its task has no budget left for; the task
// fails with Reason when the step ends. It matches ErrBudgetExhausted and
// unwraps to the store's refusal.
type BudgetError struct {
	Reason string // the task's reason code (docs/reasons.md)
	Err    error
}

func (e *BudgetError) Error() string   { return e.Err.Error() }
func (e *BudgetError) Unwrap() error   { return e.Err }
func (e *BudgetError) Is(t error) bool { return t == ErrBudgetExhausted }

// ModelError is a model call the provider failed. Kind is the SDK's name of
// it (sdk.ModelErrorKind); Message is the provider's words alone, so the
// executor's error reads "model <kind>: <message>" without a prefix per
// layer. It matches ErrModelUnavailable or ErrModelFailed.
type ModelError struct {
	Kind        string
	Unavailable bool
	Message     string
}

func (e *ModelError) Error() string { return e.Message }
func (e *ModelError) Is(t error) bool {
	if e.Unavailable {
		return t == ErrModelUnavailable
	}
	return t == ErrModelFailed
}

// ToolError is a tool call that ran and failed. It matches ErrToolFailed.
type ToolError struct{ Err error }

func (e *ToolError) Error() string   { return "tool: " + e.Err.Error() }
func (e *ToolError) Unwrap() error   { return e.Err }
func (e *ToolError) Is(t error) bool { return t == ErrToolFailed }

// ApprovalRefusedError ends a step's wait on an approval that was rejected
// or expired; the task has failed. It matches ErrApprovalRefused.
type ApprovalRefusedError struct {
	ID     string
	Status string // "rejected" or "expired"
}

func (e *ApprovalRefusedError) Error() string   { return fmt.Sprintf("approval %s %s", e.ID, e.Status) }
func (e *ApprovalRefusedError) Is(t error) bool { return t == ErrApprovalRefused }

// ErrResourceLimit matches a *LimitError.
var ErrResourceLimit = errors.New("resource limit reached")

// LimitError says a plugin process, with everything it started, was ended
// because its cgroups reached one of their limits: the host's watch, or
// the kernel's OOM kill of the whole cgroup, ended it. It rides on the
// process's ExitStatus, which the crash verdict reads.
type LimitError struct {
	// Limit is cgroups.LimitMemory or cgroups.LimitProcesses.
	Limit string
	// Bound is the setting that set it, e.g. "memory_mb = 128".
	Bound string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("its processes reached their %s limit (%s)", e.Limit, e.Bound)
}
func (e *LimitError) Is(t error) bool { return t == ErrResourceLimit }
