package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// task status shows what the model calls cost, and --full each attempt's
// whole summary (the table cuts it to 60 characters), made inert.
func TestUsageAndFullAttempt(t *testing.T) {
	long := strings.Repeat("the root model gave no final answer ", 10) + "\x1b[2J"
	atts := []*apipb.Attempt{{Number: 1, Status: "failed", Reason: "executor_failed", Summary: long,
		ModelUsage: &apipb.ModelUsage{Calls: 1, PromptTokens: 10, CompletionTokens: 2}}}
	var b bytes.Buffer
	writeTaskDetail(&b, &apipb.Task{Id: "t_x", ModelUsage: &apipb.ModelUsage{Calls: 2, PromptTokens: 2182, CompletionTokens: 90, DurationMs: 1500}}, atts, 0)
	if !strings.Contains(b.String(), "model     2 calls, 2182 prompt + 90 completion tokens, 1.5s\n") {
		t.Errorf("no usage line in:\n%s", b.String())
	}
	if strings.Contains(b.String(), long[:100]) {
		t.Errorf("the table shows the whole summary; it should cut it")
	}
	b.Reset()
	writeAttemptFull(&b, atts[0])
	out := b.String()
	if !strings.Contains(out, strings.TrimSuffix(long, "\x1b[2J")) || strings.Contains(out, "\x1b") {
		t.Errorf("--full: want the whole summary, inert:\n%q", out)
	}
	if !strings.Contains(out, "attempt 1 (failed, executor_failed)") || !strings.Contains(out, "model:   1 calls, 10 prompt + 2 completion tokens") {
		t.Errorf("--full header or usage missing:\n%s", out)
	}
	b.Reset()
	writeTaskDetail(&b, &apipb.Task{Id: "t_x"}, atts, 0)
	if strings.Contains(b.String(), "\nmodel ") {
		t.Errorf("a usage line without usage:\n%s", b.String())
	}
}
