// Package legacy is taskhost's default executor: every step of a task is one
// ordinary agent turn (a model call, the tool calls it asks for, and the
// model again) run through the host.
//
// # One step
//
// Each step starts from a fresh, empty history: nothing of an earlier
// conversation is carried over. What the model learns of the task travels in
// two messages:
//
//   - a system message with the goal, then the summaries of up to the last 5
//     completed steps as lines "- step N: <summary>", or "(no completed steps
//     yet)";
//   - the user prompt "[long-horizon task <id> step <n>/<max>] Continue the
//     task. When it is done, reply starting with TASK_COMPLETE: <final
//     summary>".
//
// The model is offered the tools the host lists for the task. While its reply
// asks for tool calls, each runs through the host (which counts, gates and
// ledgers it; a tool that needs an approval blocks there until approved), the
// results go back as "tool" messages and the model is called again. A turn
// has at most legacy.max_rounds model calls (default 8, 1..32); a reply that
// still asks for tools at the last round fails the step without running them,
// since no model call would ever read their results.
//
// The final reply (no tool calls) completes the task when it is exactly
// TASK_COMPLETE or starts with TASK_COMPLETE: (case-insensitive); otherwise
// the task continues. Either way the reply, without the sentinel and its ':',
// trimmed, is the step's summary ("completed" when empty, at most 2000
// characters). Three identical consecutive summaries of unfinished steps fail
// the task with no_progress.
//
// # The step number
//
// n in "step n/max" is max(steps completed, per the checkpoint; the number
// of the newest summary the host sent) + 1, and max is the task's step
// limit. Without crashes this equals limit − remaining, the host's own
// count, as the host charges a step before sending it. After a crashed
// attempt the host's count moves on while the step does not, and this is on
// purpose: a re-run of the same step then sends the model byte-for-byte the
// request the crashed attempt sent, so the host's effect ledger replays the
// observed model replies and tool results by (seq, fingerprint) instead of
// repeating the tool effects the model would otherwise ask for again.
//
// # Interrupted effects
//
// When an earlier attempt of the step died while effects were crossing their
// boundary (StepRequest.Indeterminate), a tool among them may or may not have
// run, and running the turn again may repeat it. So, before any model or
// tool call, the executor asks the task's principal through
// RequestApproval("retry after an interrupted <summary>?"). Approved: the
// step runs normally. Any error (the host fails the task on a rejection or
// an expiry and cancels the step) is returned as is. Indeterminate model or
// approval effects alone need no approval: asking the model again, or asking
// again for an approval, has no effect outside the host.
//
// # Host errors
//
// A cancelled step returns the context's error promptly. An exhausted budget
// fails the step (executor_failed, naming the refusal). A tool result marked
// as an error goes back to the model, which decides what to do with it; so
// does a call to a tool the task does not offer or with arguments that are
// not JSON, which the host would refuse anyway. Any other host error fails
// the step with executor_failed and a bounded message.
//
// # Spec and checkpoint
//
// The spec is {"goal": "...", "legacy": {"max_rounds": 8}}. Fields of
// "legacy" are checked strictly and an unknown one fails the step naming it;
// other top-level fields belong to the host or other executors and are
// ignored. The checkpoint (schema "legacy/1") is
// {"last_summaries": [...], "steps_done": n}, holding only the summaries the
// no-progress rule needs; any other schema or a malformed payload fails the
// step with checkpoint_incompatible, never a silent restart from zero.
//
// The executor never logs the goal, prompts, replies, tool arguments,
// results or host error messages (which may quote them): only counts, the
// outcome and error classes.
package legacy

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/sdk"
)

const (
	// Kind, Version and CheckpointSchema identify the executor to the host.
	Kind             = "legacy"
	Version          = "1.1.0"
	CheckpointSchema = "legacy/1"

	// Reason codes of failed steps, as the host knows them.
	reasonExecutorFailed         = "executor_failed"
	reasonNoProgress             = "no_progress"
	reasonCheckpointIncompatible = "checkpoint_incompatible"
	reasonApprovalRejected       = "approval_rejected"
)

// Executor is the legacy executor. It keeps no state between steps (that is
// the checkpoint's job), so one value may serve any number of steps.
type Executor struct {
	logger hclog.Logger
}

var _ sdk.Executor = (*Executor)(nil)

// New returns the executor, logging to logger (nil: nowhere).
func New(logger hclog.Logger) *Executor {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Executor{logger: logger}
}

// Describe reports the executor's identity.
func (e *Executor) Describe() sdk.Description {
	return sdk.Description{
		Kind:              Kind,
		Version:           Version,
		CheckpointSchemas: []string{CheckpointSchema},
		Capabilities:      []string{"model", "tools"},
	}
}

// Step runs one agent turn. The package comment describes the behaviour.
func (e *Executor) Step(ctx context.Context, host sdk.Host, req sdk.StepRequest) (sdk.StepResult, error) {
	log := e.logger.With("task", req.TaskID, "attempt", req.Attempt)
	var stats turnStats
	res, err := step(ctx, host, req, &stats)
	var f *failure
	if errors.As(err, &f) {
		res, err = sdk.Fail(f.reason, f.message), nil
	}
	// Only counts, codes and classes: messages may quote the goal, a reply
	// or a tool's output.
	if err != nil {
		log.Info("step ended with an error", "rounds", stats.rounds, "tool_calls", stats.toolCalls, "error_class", errorClass(err))
	} else {
		log.Info("step finished", "rounds", stats.rounds, "tool_calls", stats.toolCalls, "outcome", res.Outcome.String(), "reason", res.Reason)
	}
	return res, err
}

// step runs one step. A *failure error ends the step with sdk.Fail; any
// other error is returned to the SDK.
func step(ctx context.Context, host sdk.Host, req sdk.StepRequest, stats *turnStats) (sdk.StepResult, error) {
	sp, err := parseSpec(req.Spec)
	if err != nil {
		return sdk.StepResult{}, failf(reasonExecutorFailed, "legacy: spec: %v", err)
	}
	st, err := loadState(req.Checkpoint)
	if err != nil {
		return sdk.StepResult{}, failf(reasonCheckpointIncompatible, "legacy: checkpoint: %v", err)
	}
	if err := confirmRetry(ctx, host, req.Indeterminate); err != nil {
		return sdk.StepResult{}, err
	}
	tools, err := offeredTools(ctx, host)
	if err != nil {
		return sdk.StepResult{}, err
	}

	done := completedSteps(st, req.Recent)
	history := []sdk.Message{
		{Role: "system", Content: taskContext(req.TaskID, sp.Goal, req.Recent, done)},
		{Role: "user", Content: userPrompt(req.TaskID, done+1, req.Limits.Steps)},
	}
	t := &turn{host: host, taskID: req.TaskID, attempt: req.Attempt, maxRounds: sp.Legacy.MaxRounds, tools: tools, stats: stats}
	reply, err := t.run(ctx, history)
	if err != nil {
		return sdk.StepResult{}, err
	}

	complete, summary := parseReply(reply)
	// Opt-in only (Zara has no such rule). A completion is progress by
	// definition: only unfinished steps can stall.
	if n := sp.Legacy.StopAfterIdenticalSummaries; n > 0 && !complete && st.repeats(summary) >= n {
		return sdk.StepResult{}, failf(reasonNoProgress, "legacy: the last %d steps ended with the same summary (legacy.%s)", n, optStopAfterIdenticalSummaries)
	}
	cp, err := st.advance(summary).checkpoint()
	if err != nil {
		return sdk.StepResult{}, err
	}
	if complete {
		result, err := completionResult(summary)
		if err != nil {
			return sdk.StepResult{}, err
		}
		return sdk.Complete(summary, result, cp), nil
	}
	return sdk.Continue(summary, cp), nil
}

// failure ends a step with sdk.Fail(reason, message) instead of an error:
// the executor decided the task cannot go on, nothing broke.
type failure struct {
	reason  string
	message string
}

func (f *failure) Error() string { return f.reason + ": " + f.message }

// failf builds a *failure with a bounded message: it ends up in the store
// and in events, so it must not grow with an error chain.
func failf(reason, format string, args ...any) error {
	return &failure{reason: reason, message: truncateRunes(fmt.Sprintf(format, args...), maxFailRunes)}
}

// errorClass names what kind of error ended a step, for the log, which must
// not carry error messages.
func errorClass(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	if k := sdk.HostErrorKind(err); k != "" {
		return k
	}
	return "other"
}
