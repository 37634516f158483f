package legacy

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
)

const (
	// sentinel starts the reply of a model that considers the task done.
	sentinel = "TASK_COMPLETE"
	// emptySummary stands for a step whose reply said nothing.
	emptySummary = "completed"
	// noSummary stands for an empty recorded summary in the context.
	noSummary = "(no summary)"
	// noStepsYet is the context's progress list before any step completed.
	noStepsYet = "(no completed steps yet)"
	// maxSummaryRunes bounds a step summary, and maxContextRunes the whole
	// context message: both are Zara's step_log_chars (2000).
	maxSummaryRunes = 2000
	maxContextRunes = 2000
	// recentInContext is how many of the latest step summaries the context
	// lists (Zara's _CONTEXT_STEP_WINDOW).
	recentInContext = 5
	// maxFailRunes bounds the message of a failed step.
	maxFailRunes = 500
)

// taskContext is the system message of a step, Zara's _task_context: the
// only memory a step has of the task. done is the number of completed
// steps; recent are the summaries of the latest of them, oldest first, so
// recent[i] is step done-len(recent)+i+1. Those numbers are the task's own
// step ordinals, not the host's attempt numbers (sdk.Summary.Step), which
// move on with every crashed attempt.
func taskContext(taskID, goal string, recent []sdk.Summary, done int) string {
	lines := []string{
		"Long-horizon task " + taskID,
		// Zara's store keeps the goal stripped.
		"Goal: " + pyStrip(goal),
		"",
		"Progress from earlier steps:",
	}
	first := done - len(recent) + 1
	if len(recent) > recentInContext {
		first += len(recent) - recentInContext
		recent = recent[len(recent)-recentInContext:]
	}
	if len(recent) == 0 {
		lines = append(lines, noStepsYet)
	}
	for i, s := range recent {
		text := s.Text
		if text == "" {
			text = noSummary
		}
		// Summaries keep their line breaks, as in Zara: the cut below bounds
		// the whole message instead.
		lines = append(lines, fmt.Sprintf("- step %d: %s", first+i, text))
	}
	return truncateRunes(strings.Join(lines, "\n"), maxContextRunes)
}

// maxChildrenRunes bounds the message that lists a task's children.
const maxChildrenRunes = 8000

// childrenContext lists a task's child tasks (task.delegate) for its
// step: one line each, with a completed child's result (the host cuts
// each to 1000 characters), the whole cut to maxChildrenRunes.
func childrenContext(children []sdk.ChildTask) string {
	lines := []string{"Child tasks you delegated:"}
	for _, c := range children {
		line := "- " + c.TaskID + ": " + c.Status
		if c.Reason != "" {
			line += " (" + c.Reason + ")"
		}
		if c.Result != "" {
			line += ": " + c.Result
		}
		lines = append(lines, line)
	}
	return truncateRunes(strings.Join(lines, "\n"), maxChildrenRunes)
}

// userPrompt is Zara's _step_prompt, word for word. n is the number of
// completed steps + 1, max the task's step limit.
func userPrompt(taskID string, n int, max int64) string {
	return fmt.Sprintf("[long-horizon task %s step %d/%d] ", taskID, n, max) +
		"Work toward the goal described in your task context. " +
		"Use tools only when the goal requires them. " +
		"When the goal is fully achieved, reply with a final answer starting with " +
		sentinel + ": followed by a short result summary. " +
		"Otherwise report concrete progress made in this step."
}

// completedSteps is the number of steps the task has completed: the
// checkpoint's count. The host's summaries can only be more when a
// checkpoint is missing (a task's first step has none), and then they are
// the better count. Neither moves until a step completes, so every attempt
// of one step sends the model byte-for-byte the same request (see the
// package comment).
func completedSteps(st state, recent []sdk.Summary) int {
	return max(st.StepsDone, len(recent))
}

// parseReply reads the turn's final reply as Zara's runner does: it
// completes the task when reply.strip().upper().startswith(sentinel), and
// the step's summary is _bounded_summary(reply).
func parseReply(reply string) (complete bool, summary string) {
	text := pyStrip(reply)
	if n, ok := sentinelPrefix(text); ok {
		complete = true
		text = pyStrip(strings.TrimLeft(text[n:], ":"))
	}
	if text == "" {
		return complete, emptySummary
	}
	return complete, truncateRunes(text, maxSummaryRunes)
}

// sentinelPrefix reports whether text, upper-cased as Python's str.upper
// does, starts with the sentinel, and if so how many bytes of text the
// sentinel's 13 characters take.
//
// Only the upper-casing of the first 13 characters matters, and only
// whether each becomes the sentinel's ASCII character at its place. The
// characters whose Python upper case is a single ASCII letter are the
// ASCII ones, 'ı' (U+0131, to I) and 'ſ' (U+017F, to S), and unicode.ToUpper
// maps them alike; so "taſk_complete" completes, the Kelvin sign (U+212A,
// already upper case) is no K. Characters that upper-case to several
// ('ß' to "SS", 'ﬅ' to "ST", 'ẗ' to "T̈") never spell the sentinel at
// their place, and none starts with its last letter, so they cannot
// complete either; unicode.ToUpper leaves them non-ASCII.
func sentinelPrefix(text string) (int, bool) {
	pos := 0
	for i := range len(sentinel) {
		r, size := utf8.DecodeRuneInString(text[pos:])
		if size == 0 || unicode.ToUpper(r) != rune(sentinel[i]) {
			return 0, false
		}
		pos += size
	}
	return pos, true
}

// pyStrip is Python's str.strip(): it removes the characters str.isspace
// accepts, which are unicode.IsSpace's and the ASCII separators U+001C to
// U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, pyIsSpace)
}

func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// completionResult is the result of a completed task.
func completionResult(summary string) ([]byte, error) {
	out, err := json.Marshal(struct {
		Summary string `json:"summary"`
	}{summary})
	if err != nil {
		return nil, fmt.Errorf("legacy: result: %w", err)
	}
	return out, nil
}

// truncateRunes cuts s to at most n runes (characters, as Python's len
// counts them), never inside a rune.
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}
