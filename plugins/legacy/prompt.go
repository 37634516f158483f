package legacy

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
)

const (
	// sentinel starts the reply of a model that considers the task done.
	sentinel = "TASK_COMPLETE"
	// emptySummary stands for a step whose reply said nothing.
	emptySummary = "completed"
	// maxSummaryRunes bounds a step summary (the host bounds it too, so the
	// store never sees an oversized one).
	maxSummaryRunes = 2000
	// recentInPrompt is how many of the latest step summaries the system
	// message carries.
	recentInPrompt = 5
	// maxFailRunes bounds the message of a failed step.
	maxFailRunes = 500
)

// systemMessage carries the goal and what the latest steps achieved: the
// only memory a step has of the task.
func systemMessage(goal string, recent []sdk.Summary) string {
	var b strings.Builder
	b.WriteString("You are carrying out a long-horizon task, one step at a time. ")
	b.WriteString("Each step starts afresh: what you know of the earlier steps is their summaries below. ")
	b.WriteString("Your final reply of a step becomes its summary.\n\nGoal:\n")
	b.WriteString(goal)
	b.WriteString("\n\nCompleted steps (oldest first):\n")
	if len(recent) == 0 {
		b.WriteString("(no completed steps yet)\n")
		return b.String()
	}
	if len(recent) > recentInPrompt {
		recent = recent[len(recent)-recentInPrompt:]
	}
	for _, s := range recent {
		// One line per step: a summary with line breaks must not be able
		// to fake further step lines.
		line := strings.Join(strings.Fields(truncateRunes(s.Text, maxSummaryRunes)), " ")
		fmt.Fprintf(&b, "- step %d: %s\n", s.Step, line)
	}
	return b.String()
}

// userPrompt is the turn's instruction. The goal is not in it: it travels in
// the system message only.
func userPrompt(taskID string, n int, maxSteps int64) string {
	return fmt.Sprintf("[long-horizon task %s step %d/%d] Continue the task. When it is done, reply starting with %s: <final summary>",
		taskID, n, maxSteps, sentinel)
}

// stepNumber is the number of the step being run: one more than the newest
// step known to be done, whether from the checkpoint's count or from the
// host's numbering of the summaries. Neither changes until a step
// completes, so every attempt of one step gets the same number and sends
// the same model request (see the package comment).
func stepNumber(st state, recent []sdk.Summary) int {
	done := st.StepsDone
	if len(recent) > 0 {
		done = max(done, recent[len(recent)-1].Step)
	}
	return done + 1
}

// parseReply reads the turn's final reply: whether it completes the task,
// and the step's summary.
//
// The sentinel must be the whole reply or be followed by ':' at once, so
// that "TASK_COMPLETELY_BROKEN" is not a completion. Comparing exactly
// len(sentinel) bytes keeps the case folding ASCII: any non-ASCII rune
// takes more than one byte, so a slice holding one has too few runes to
// fold equal to the sentinel (the Kelvin sign does not make a K here).
func parseReply(reply string) (complete bool, summary string) {
	text := strings.TrimSpace(reply)
	if len(text) >= len(sentinel) && strings.EqualFold(text[:len(sentinel)], sentinel) {
		if rest := text[len(sentinel):]; rest == "" || rest[0] == ':' {
			complete, text = true, strings.TrimPrefix(rest, ":")
		}
	}
	return complete, summarize(text)
}

// summarize bounds a reply into a step summary.
func summarize(text string) string {
	text = strings.TrimSpace(text)
	if text == "" {
		return emptySummary
	}
	return truncateRunes(text, maxSummaryRunes)
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

// truncateRunes cuts s to at most n runes (characters, as the host counts
// them), never inside a rune.
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
