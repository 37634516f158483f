// Package legacy is taskhost's default executor: every step of a task is one
// ordinary agent turn (a model call, the tool calls it asks for, and the
// model again) run through the host. It reproduces the task runner it
// replaces, Zara's zara/tasks/runner.py, rule for rule; the rules below are
// that runner's, and testdata/zara_compat.json is the table that proves
// them, in-process and through the real binaries.
//
// # One step
//
// Each step starts from a fresh, empty history: nothing of an earlier
// conversation is carried over. What the model learns of the task travels in
// two messages. The system message (Zara's task context) is, line by line:
//
//	Long-horizon task <id>
//	Goal: <goal>
//
//	Progress from earlier steps:
//	- step <k>: <summary>          (the last 5 completed steps, oldest first)
//
// with the goal stripped of surrounding white space (Zara's store keeps it
// so), "(no completed steps yet)" in place of the step lines before any
// step completed, and "(no summary)" for an empty summary. Summaries keep
// their line breaks. The whole message is then cut to 2000 characters
// (Unicode code points, as Python counts them). The user message is
//
//	[long-horizon task <id> step <n>/<max>] Work toward the goal described
//	in your task context. Use tools only when the goal requires them. When
//	the goal is fully achieved, reply with a final answer starting with
//	TASK_COMPLETE: followed by a short result summary. Otherwise report
//	concrete progress made in this step.
//
// (one line), where max is the task's step limit.
//
// The model is offered the tools the host lists for the task. While its reply
// asks for tool calls, each runs through the host (which counts, gates and
// ledgers it; a tool that needs an approval blocks there until approved), the
// results go back as "tool" messages and the model is called again. A turn
// has at most legacy.max_rounds model calls (default 8, 1..32); a reply that
// still asks for tools at the last round fails the step without running them,
// since no model call would ever read their results.
//
// # Completion and the summary
//
// The final reply (no tool calls) completes the task when
// reply.strip().upper().startswith("TASK_COMPLETE") in Python: after
// stripping white space (Python's str.isspace, which is unicode.IsSpace and
// U+001C..U+001F), the first 13 characters upper-case to the sentinel. So
// "TASK_COMPLETE done", "task_complete: x", "taſk_complete" (long s) and even
// "TASK_COMPLETELY_BROKEN" complete; the sentinel mid-sentence or on a later
// line does not, and neither does a Kelvin sign for the K. Otherwise the task
// continues.
//
// The step's summary is the stripped reply; when it completes, the first 13
// characters are dropped, then every leading ':', then the result is
// stripped again ("TASK_COMPLETELY_BROKEN" gives "LY_BROKEN",
// "TASK_COMPLETE:: x" gives "x"). An empty summary becomes "completed"; a
// summary is cut to 2000 characters. A completed task's result is
// {"summary": <summary>}.
//
// # The step number
//
// k in the context and n in the prompt are the task's own step ordinals: n
// is the number of completed steps (the checkpoint's steps_done) + 1, and
// the context numbers the summaries it lists up to n-1. After a crashed
// attempt the same n is asked again: prompts go 1, 2, 2, 3. The host's own
// count (and sdk.Summary.Step) numbers attempts instead, which move on with
// every crash; they are not used. This is on purpose twice over: it is
// Zara's numbering, and a re-run of a step sends the model byte-for-byte the
// request the crashed attempt sent, so the host's effect ledger replays the
// observed model replies and tool results by (seq, fingerprint) instead of
// repeating the tool effects the model would otherwise ask for again.
//
// # Where this differs from Zara, on purpose
//
//   - The step budget is charged per claimed attempt, not per completed
//     step: an attempt that crashes still uses a step, so a crash loop
//     cannot run forever. (Zara charges completed steps only.)
//   - Wall time accumulates across runs of a task (stop and resume do not
//     reset it); Zara's wall clock restarts with each run.
//   - Reasons are the host's closed enum (step_budget_exhausted,
//     executor_failed, approval_rejected, ...), not free strings.
//   - An interrupted tool effect asks an approval before a retry (below);
//     Zara simply runs the step again.
//   - Cancel is idempotent: cancelling a cancelled task is not an error
//     (Zara's store refuses the transition).
//   - A reply the model server could not parse (sdk.ModelKindBadReply) is
//     told to the model once, as a user message, and the model is asked
//     again; a second one in the step fails it with model_bad_reply.
//   - A final reply cut at the output limit (finish_reason "length") never
//     completes the task; its summary starts with cutMark.
//   - With StepRequest.ModelPromptTokens set ([model] context_tokens), each
//     request is kept within it by cutting the oldest tool results first
//     (fit.go); a context refusal anyway cuts harder and asks once more,
//     then fails the step with model_context_exceeded.
//   - Zara has no no-progress rule, and neither has this executor unless a
//     task asks for one: with legacy.stop_after_identical_summaries = N
//     (2..100; absent or 0: off), N consecutive unfinished steps with the
//     same summary fail the task with no_progress. A completion is progress.
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
// The spec is {"goal": "...", "legacy": {"max_rounds": 8,
// "stop_after_identical_summaries": 0}}. Fields of "legacy" are checked
// strictly and an unknown one fails the step naming it; other top-level
// fields belong to the host or other executors and are ignored. The
// checkpoint (schema "legacy/1") is {"last_summaries": [latest],
// "steps_done": n, "repeats": r}: the step count and what the opt-in
// no-progress rule needs, bounded however long the task. Checkpoints of
// versions before 1.1.0 (up to 3 last_summaries, no repeats) load; any
// other schema or a malformed payload fails the step with
// checkpoint_incompatible, never a silent restart from zero.
//
// The context lists the summaries the host sends (StepRequest.Recent), which
// are the task's last completed steps; the host sends 5 by default
// (limits.recent_summaries), and a host configured to send fewer shows fewer.
//
// The executor never logs the goal, prompts, replies, tool arguments,
// results or host error messages (which may quote them): only counts, the
// outcome and error classes.
package legacy

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	reasonModelBadReply          = "model_bad_reply"
	reasonModelContextExceeded   = "model_context_exceeded"
)

// cutMark starts the summary of a step whose final reply stopped at the
// output limit: it may be incomplete, so it never completes the task.
const cutMark = "[reply cut at the output limit (max_tokens)] "

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
		log.Info("step finished", "rounds", stats.rounds, "tool_calls", stats.toolCalls, "outcome", res.Outcome.String(), "reason", res.Reason,
			"cut_to_fit", stats.cut, "bad_replies", stats.badReplies, "reply_cut_at_length", stats.cutReply)
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
		{Role: "system", Content: truncateRunes(taskContext(req.TaskID, sp.Goal, req.Recent, done), stepLogChars(req))},
	}
	if len(req.Children) > 0 {
		// Not in Zara's context, which is kept exact: a message of its own.
		history = append(history, sdk.Message{Role: "system", Content: childrenContext(req.Children)})
	}
	history = append(history, sdk.Message{Role: "user", Content: userPrompt(req.TaskID, done+1, req.Limits.Steps)})
	t := &turn{host: host, taskID: req.TaskID, attempt: req.Attempt, maxRounds: sp.Legacy.MaxRounds, tools: tools, stats: stats,
		fit: newFitter(req.ModelPromptTokens)}
	reply, err := t.run(ctx, history)
	if err != nil {
		return sdk.StepResult{}, err
	}

	complete, summary := parseReply(reply.text)
	summary = truncateRunes(summary, stepLogChars(req))
	if reply.cut {
		// Not a summary the model finished: flagged, and the task goes
		// on even if it began with the sentinel.
		complete = false
		summary = truncateRunes(cutMark+strings.TrimSpace(reply.text), min(maxSummaryRunes, stepLogChars(req)))
		stats.cutReply = true
	}
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
