package host

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// Every model call's usage is recorded: summed by attempt and for the task
// in the store, and per step in its step.completed event.
func TestModelUsageRecorded(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "usage.json")
	if err := os.WriteFile(script, []byte(`{"version": 1, "rules": [{"when": {}, "reply": {"content": "ok", "finish_reason": "stop",
		"usage": {"prompt_tokens": 1091, "completion_tokens": 45}}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	h := openHost(t, "", func(c *config.Config) { c.Model = config.Model{Provider: config.ProviderScripted, Script: script} })
	task := create(t, h, alice, map[string]any{"steps": 2, "call_model": true}, Limits{Steps: 5})
	if got := waitEnd(t, h, alice, task.ID); got.Status != store.StatusCompleted {
		t.Fatalf("task %s (%s: %s)", got.Status, got.Reason, got.Message)
	}
	total, by, err := h.Runner.TaskModelUsage(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if total.Calls != 2 || total.PromptTokens != 2*1091 || total.CompletionTokens != 2*45 || len(by) != 2 || by[1].Calls != 1 {
		t.Fatalf("usage %+v by attempt %+v: want 2 calls of 1091+45, one an attempt", total, by)
	}
	evs, err := h.Store.Events(context.Background(), alice, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, ev := range evs {
		if ev.Type != EventStepCompleted {
			continue
		}
		var p EventPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.PromptTokens != 1091 || p.CompletionTokens != 45 {
			t.Errorf("step.completed %s: want the step's 1091+45 tokens", ev.Payload)
		}
		steps++
	}
	if steps != 2 {
		t.Errorf("%d step.completed events, want 2", steps)
	}
}

// A task's spec may set its own model options and tool list: checked at
// creation, naming the field.
func TestTaskModelOptionsChecked(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", func(c *config.Config) { c.Model.MaxTokens = 512 })
	for _, tc := range []struct {
		name, spec, field string
	}{
		{"ok", `{"goal":"g","model":{"max_tokens":512,"temperature":0,"seed":1,"stop":["x"]},"tools":["workspace.read"]}`, ""},
		{"max_tokens over the configured", `{"goal":"g","model":{"max_tokens":513}}`, "spec.model.max_tokens"},
		{"max_tokens under the floor", `{"goal":"g","model":{"max_tokens":15}}`, "spec.model.max_tokens"},
		{"temperature", `{"goal":"g","model":{"temperature":2.5}}`, "spec.model.temperature"},
		{"unknown option", `{"goal":"g","model":{"num_ctx":8192}}`, "spec.model"},
		{"unknown tool", `{"goal":"g","tools":["workspace.read","net.fetch"]}`, "spec.tools[1]"},
		{"tools not a list", `{"goal":"g","tools":"workspace.read"}`, "spec.tools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: []byte(tc.spec)})
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe, ok := errors.AsType[*plugin.FieldError](err)
			if !ok || fe.Field != tc.field {
				t.Fatalf("Create = %v, want a refusal of the field %s", err, tc.field)
			}
		})
	}
}

// A task whose spec names its tools may call only those: another enabled
// tool is refused before it is admitted (nothing charged), while the same
// call of a task without a list runs.
func TestTaskToolListEnforced(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	run := func(tools string) (store.Task, store.Attempt) {
		t.Helper()
		sp := `{"goal":"g",` + tools + `"testexec":{"steps":1,"call_tool":{"name":"workspace.list","args":{}}}}`
		task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: []byte(sp), Limits: Limits{Steps: 1}})
		if err != nil {
			t.Fatal(err)
		}
		got := waitEnd(t, h, alice, task.ID)
		atts, err := h.Store.ListAttempts(context.Background(), alice, task.ID)
		if err != nil || len(atts) != 1 {
			t.Fatalf("attempts %+v, %v", atts, err)
		}
		return got, atts[0]
	}
	listed, att := run(`"tools":["workspace.read"],`)
	if listed.Budgets.ToolCalls.Used != 0 || !strings.HasPrefix(att.Summary, "tool error") {
		t.Errorf("a tool outside spec.tools: charged %+v, attempt %q; want it refused uncharged", listed.Budgets.ToolCalls, att.Summary)
	}
	open, att := run("")
	if open.Budgets.ToolCalls.Used != 1 || strings.HasPrefix(att.Summary, "tool error") {
		t.Errorf("without spec.tools: charged %+v, attempt %q; want the call run", open.Budgets.ToolCalls, att.Summary)
	}
	if !(taskOptions{Tools: []string{"workspace.read"}}).allows("workspace.read") || (taskOptions{Tools: []string{}}).allows("shell.run") || !(taskOptions{}).allows("shell.run") {
		t.Error("allows: a list admits only its tools ([] none); no list admits every tool")
	}
}
