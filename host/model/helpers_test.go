package model

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
)

// writeScript writes content to a fresh file and returns its path.
func writeScript(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newScriptedFrom builds a scripted provider from script text.
func newScriptedFrom(t *testing.T, content string) Provider {
	t.Helper()
	p, err := New(config.Model{Provider: config.ProviderScripted, Script: writeScript(t, content)}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// wantKind fails the test unless err is an *Error of kind want.
func wantKind(t *testing.T, err error, want ErrorKind) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a %v error", want)
	}
	merr, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("got %T %v, want *model.Error of kind %v", err, err, want)
	}
	if merr.Kind != want {
		t.Fatalf("got kind %v (%v), want %v", merr.Kind, err, want)
	}
	return merr
}

// legacyPrompt is the user prompt the legacy executor sends for a step
// (REFERENCE.md, "Legacy executor").
func legacyPrompt(taskID string, step, maxSteps int) string {
	return fmt.Sprintf("[long-horizon task %s step %d/%d] Continue the task. When it is done, reply starting with TASK_COMPLETE: <final summary>", taskID, step, maxSteps)
}

// legacySystem is the legacy executor's context message: the goal and the
// last step summaries.
func legacySystem(goal string, summaries []string) string {
	var b strings.Builder
	b.WriteString("Goal: " + goal + "\n")
	if len(summaries) == 0 {
		b.WriteString("(no completed steps yet)")
	}
	for i, s := range summaries {
		fmt.Fprintf(&b, "- step %d: %s\n", i+1, s)
	}
	return b.String()
}

// legacyTurn plays one legacy step against p the way the legacy executor
// does: a fresh history, model calls until a reply without tool calls, each
// tool call answered by result. It returns the final reply and every tool
// call the model made.
func legacyTurn(t *testing.T, p Provider, taskID string, step, maxSteps int, summaries []string, result func(ToolCall) string) (string, []ToolCall) {
	t.Helper()
	msgs := []Message{
		{Role: RoleSystem, Content: legacySystem("write a short report", summaries)},
		{Role: RoleUser, Content: legacyPrompt(taskID, step, maxSteps)},
	}
	var calls []ToolCall
	for round := 0; round < 8; round++ {
		resp, err := p.Complete(context.Background(), Request{Messages: msgs, TaskID: taskID})
		if err != nil {
			t.Fatalf("step %d round %d: %v", step, round, err)
		}
		m := resp.Message
		if m.Role != RoleAssistant {
			t.Fatalf("step %d: reply role %q, want assistant", step, m.Role)
		}
		msgs = append(msgs, m)
		if len(m.ToolCalls) == 0 {
			return m.Content, calls
		}
		for _, tc := range m.ToolCalls {
			calls = append(calls, tc)
			msgs = append(msgs, Message{Role: RoleTool, ToolCallID: tc.ID, Content: result(tc)})
		}
	}
	t.Fatalf("step %d: no final reply after 8 rounds", step)
	return "", nil
}
