package model

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/taskhost/taskhost/host/config"
)

// ruleKindsScript has one rule per kind of condition, each with a reply
// naming it. Order matters: specific rules first, the default last.
const ruleKindsScript = `{
  "version": 1,
  "rules": [
    {"name": "depth", "when": {"depth": 2}, "reply": {"content": "depth-2"}},
    {"name": "system", "when": {"system_contains": "SYSMARK"}, "reply": {"content": "system"}},
    {"name": "any", "when": {"any_contains": "[rlm root]"}, "reply": {"content": "any"}},
    {"name": "tool+result", "when": {"tool": "shell.run", "contains": "denied"}, "reply": {"content": "tool-denied"}},
    {"name": "tool", "when": {"last_role": "tool", "tool": "shell.run"}, "reply": {"content": "tool-shell"}},
    {"name": "tool result substring", "when": {"last_role": "tool", "contains": "42"}, "reply": {"content": "result-42"}},
    {"name": "second turn", "when": {"last_role": "user", "assistant_turns": 1}, "reply": {"content": "turn-1"}},
    {"name": "step", "when": {"last_role": "user", "contains": " step 2/"}, "reply": {"content": "step-2"}},
    {"name": "tool calls", "when": {"last_role": "user", "contains": "call tools"},
     "reply": {"content": "calling", "tool_calls": [
       {"name": "workspace.write", "arguments": {"path": "a.md", "content": "x"}},
       {"name": "time.sleep"}
     ]}},
    {"name": "error", "when": {"contains": "please fail"}, "reply": {"error": {"kind": "rate_limited", "status": 429, "message": "simulated"}}},
    {"name": "default", "when": {}, "reply": {"content": "default"}}
  ]
}`

func TestScriptedRuleKinds(t *testing.T) {
	p := newScriptedFrom(t, ruleKindsScript)
	user := func(s string) Message { return Message{Role: RoleUser, Content: s} }
	callShell := Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "shell.run", Arguments: `{}`}}}
	callWrite := Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "workspace.write", Arguments: `{}`}}}
	tests := []struct {
		name  string
		req   Request
		want  string
		calls []ToolCall
	}{
		{"depth", Request{Messages: []Message{user("x")}, Depth: 2}, "depth-2", nil},
		{"depth other", Request{Messages: []Message{user("x")}, Depth: 1}, "default", nil},
		{"system_contains", Request{Messages: []Message{{Role: RoleSystem, Content: "a SYSMARK b"}, user("x")}}, "system", nil},
		{"system_contains ignores user", Request{Messages: []Message{user("SYSMARK")}}, "default", nil},
		{"any_contains in system", Request{Messages: []Message{{Role: RoleSystem, Content: "[rlm root] ctx"}, user("go")}}, "any", nil},
		{"any_contains in earlier user", Request{Messages: []Message{user("[rlm root]"), {Role: RoleAssistant, Content: "g"}, user("result")}}, "any", nil},
		{"tool name and result", Request{Messages: []Message{user("x"), callShell, {Role: RoleTool, ToolCallID: "call_1", Content: "approval denied"}}}, "tool-denied", nil},
		{"tool name", Request{Messages: []Message{user("x"), callShell, {Role: RoleTool, ToolCallID: "call_1", Content: "hello"}}}, "tool-shell", nil},
		{"tool result substring, other tool", Request{Messages: []Message{user("x"), callWrite, {Role: RoleTool, ToolCallID: "call_1", Content: "wrote 42 bytes"}}}, "result-42", nil},
		{"tool with unknown call id", Request{Messages: []Message{user("x"), callShell, {Role: RoleTool, ToolCallID: "call_9", Content: "hello"}}}, "default", nil},
		{"assistant_turns", Request{Messages: []Message{user("a"), {Role: RoleAssistant, Content: "b"}, user("c")}}, "turn-1", nil},
		{"step", Request{Messages: []Message{user(legacyPrompt("t1", 2, 20))}}, "step-2", nil},
		{"step 12 is not step 2", Request{Messages: []Message{user(legacyPrompt("t1", 12, 20))}}, "default", nil},
		{"tool calls", Request{Messages: []Message{user("please call tools")}}, "calling", []ToolCall{
			{ID: "call_1", Name: "workspace.write", Arguments: `{"path":"a.md","content":"x"}`},
			{ID: "call_2", Name: "time.sleep", Arguments: `{}`},
		}},
		{"default", Request{Messages: []Message{user("anything")}}, "default", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := p.Complete(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Role != RoleAssistant || resp.Message.Content != tt.want {
				t.Errorf("reply = %q (role %q), want %q", resp.Message.Content, resp.Message.Role, tt.want)
			}
			if !reflect.DeepEqual(resp.Message.ToolCalls, tt.calls) {
				t.Errorf("tool calls = %#v, want %#v", resp.Message.ToolCalls, tt.calls)
			}
		})
	}
}

func TestScriptedErrorReply(t *testing.T) {
	p := newScriptedFrom(t, ruleKindsScript)
	_, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: "please fail"}}})
	merr := wantKind(t, err, KindRateLimited)
	if merr.Status != 429 || !strings.Contains(merr.Message, "simulated") || !strings.Contains(merr.Message, "rule 10 of script") {
		t.Errorf("error = %+v, want status 429 and a message naming rule 10 and its text", merr)
	}
	// The shared rule must not have been modified by building the error.
	_, err2 := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: "please fail"}}})
	if err.Error() != err2.Error() {
		t.Errorf("second error %q differs from first %q", err2, err)
	}
}

func TestScriptedFirstMatchWins(t *testing.T) {
	p := newScriptedFrom(t, `{"version": 1, "rules": [
		{"when": {"contains": "hello"}, "reply": {"content": "first"}},
		{"when": {"contains": "hello world"}, "reply": {"content": "second"}},
		{"when": {}, "reply": {"content": "third"}}
	]}`)
	tests := []struct{ in, want string }{
		{"hello world", "first"},
		{"hello", "first"},
		{"bye", "third"},
	}
	for _, tt := range tests {
		resp, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: tt.in}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Content != tt.want {
			t.Errorf("%q: got %q, want %q", tt.in, resp.Message.Content, tt.want)
		}
	}
}

func TestScriptedNoMatch(t *testing.T) {
	p := newScriptedFrom(t, `{"version": 1, "rules": [{"when": {"last_role": "tool"}, "reply": {"content": "x"}}]}`)
	long := "[long-horizon task abc step 4/20] " + strings.Repeat("very long prompt ", 100)
	_, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: long}}, Depth: 0})
	merr := wantKind(t, err, KindScript)
	for _, want := range []string{"matched the last message", `role "user"`, "step 4/20", "script.json"} {
		if !strings.Contains(merr.Message, want) {
			t.Errorf("message %q does not contain %q", merr.Message, want)
		}
	}
	if len(merr.Message) > maxNoMatchExcerpt+len("script ")+300 {
		t.Errorf("message is %d bytes: the excerpt is not bounded", len(merr.Message))
	}
}

func TestScriptedToolCallIDsContinueTheConversation(t *testing.T) {
	p := newScriptedFrom(t, `{"version": 1, "rules": [
		{"when": {}, "reply": {"tool_calls": [{"name": "a"}, {"name": "b"}]}}
	]}`)
	req := Request{Messages: []Message{
		{Role: RoleUser, Content: "go"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "a"}, {ID: "call_2", Name: "b"}}},
		{Role: RoleTool, ToolCallID: "call_1", Content: "ok"},
		{Role: RoleTool, ToolCallID: "call_2", Content: "ok"},
	}}
	for range 2 { // deterministic: the same request yields the same IDs
		resp, err := p.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tc := range resp.Message.ToolCalls {
			ids = append(ids, tc.ID)
		}
		if want := []string{"call_3", "call_4"}; !reflect.DeepEqual(ids, want) {
			t.Errorf("ids = %v, want %v", ids, want)
		}
	}
}

func TestScriptedRequestChecks(t *testing.T) {
	p := newScriptedFrom(t, `{"version": 1, "rules": [{"when": {}, "reply": {"content": "x"}}]}`)
	_, err := p.Complete(context.Background(), Request{})
	wantKind(t, err, KindRequest)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.Complete(ctx, Request{Messages: []Message{{Role: RoleUser, Content: "x"}}})
	wantKind(t, err, KindCanceled)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(%v, context.Canceled) = false", err)
	}
}

// TestDefaultScriptLegacyFlow drives the embedded default script through the
// three legacy steps, as the legacy executor would.
func TestDefaultScriptLegacyFlow(t *testing.T) {
	p, err := New(config.Model{Provider: config.ProviderScripted}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		final string
		calls []ToolCall
	}
	want := []step{
		{"wrote notes", []ToolCall{{ID: "call_1", Name: "workspace.write",
			Arguments: `{"path":"notes.md","content":"# Notes\n\nWritten by the scripted demo model in step 1.\n"}`}}},
		{"ran the command", []ToolCall{{ID: "call_1", Name: "shell.run", Arguments: `{"command":"echo hello"}`}}},
		{"TASK_COMPLETE: report ready", nil},
	}
	result := func(tc ToolCall) string { return `{"ok":true}` }
	for run := range 2 { // the whole flow is deterministic
		var summaries []string
		for i, w := range want {
			final, calls := legacyTurn(t, p, "tsk_demo", i+1, 20, summaries, result)
			if final != w.final || !reflect.DeepEqual(calls, w.calls) {
				t.Fatalf("run %d step %d: got %q %#v, want %q %#v", run, i+1, final, calls, w.final, w.calls)
			}
			summaries = append(summaries, final)
		}
	}
}

func TestDefaultScriptRLM(t *testing.T) {
	p, err := New(config.Model{}, nil) // the zero config is the scripted default
	if err != nil {
		t.Fatal(err)
	}
	complete := func(req Request) string {
		t.Helper()
		resp, err := p.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Message.Content
	}
	root := []Message{
		{Role: RoleSystem, Content: "[rlm root] You see a context handle; write Prolog goals."},
		{Role: RoleUser, Content: "Goal: summarise the document."},
	}
	if got, want := complete(Request{Messages: root}), `{"plan":"machinespirit.plan/1","steps":[{"op":"peek","bytes":512,"as":"head"},{"op":"query","prompt":"Summarise the first chunk: {{head}}","as":"s"},{"op":"final","answer":"{{s}}"}]}`; got != want {
		t.Errorf("root iteration 1 = %q, want %q", got, want)
	}
	later := append(root[:2:2], Message{Role: RoleAssistant, Content: "true"}, Message{Role: RoleUser, Content: "result: true"})
	if got, want := complete(Request{Messages: later}), `{"plan":"machinespirit.plan/1","steps":[{"op":"final","answer":"scripted: no further work"}]}`; got != want {
		t.Errorf("root iteration 2 = %q, want %q", got, want)
	}
	sub := Request{Depth: 1, Messages: []Message{{Role: RoleUser, Content: "[rlm sub] Summarise the first chunk\n\nchunk text"}}}
	if got := complete(sub); !strings.Contains(got, "summary") {
		t.Errorf("sub-call = %q, want a short summary", got)
	}
}

func TestExampleScripts(t *testing.T) {
	demo, err := os.ReadFile("../../examples/scripts/legacy-demo.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(demo) != defaultScript {
		t.Error("examples/scripts/legacy-demo.json differs from the embedded default_script.json: copy one onto the other")
	}

	p, err := New(config.Model{Script: "../../examples/scripts/legacy-reject.json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 2; step++ {
		resp, err := p.Complete(context.Background(), Request{Messages: []Message{
			{Role: RoleSystem, Content: legacySystem("g", nil)},
			{Role: RoleUser, Content: legacyPrompt("tsk_rej", step, 5)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if tc := resp.Message.ToolCalls; len(tc) != 1 || tc[0].Name != "shell.run" {
			t.Fatalf("step %d: got %+v, want one shell.run call", step, resp.Message)
		}
	}
	final, _ := legacyTurn(t, p, "tsk_rej", 1, 5, nil, func(ToolCall) string { return `{"error":"approval rejected"}` })
	if final != "the command was rejected" {
		t.Errorf("after a rejection: %q", final)
	}
}

func TestScriptedConcurrent(t *testing.T) {
	p, err := New(config.Model{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for step := 1; step <= 3; step++ {
				_, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: legacyPrompt("t", step, 3)}}, Depth: i % 2})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// An argument "$tool_result.FIELD" takes FIELD of the last tool result; a
// missing field or a result that is not an object leaves it as written.
func TestScriptedArgumentFromToolResult(t *testing.T) {
	cases := []struct {
		name, last, want string
	}{
		{"field", `{"task_id":"t_abc","status":"pending"}`, `{"other":"x","task_id":"t_abc"}`},
		{"missing field", `{"status":"pending"}`, `{"other":"x","task_id":"$tool_result.task_id"}`},
		{"not json", `error: refused`, `{"task_id":"$tool_result.task_id","other":"x"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msgs := []Message{{Role: RoleUser, Content: "go"}, {Role: RoleTool, Content: tc.last}}
			if got := fromToolResult(`{"task_id":"$tool_result.task_id","other":"x"}`, msgs); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}
