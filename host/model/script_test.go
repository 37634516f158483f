package model

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
)

func TestScriptErrors(t *testing.T) {
	bigContent := strings.Repeat("x", MaxContentBytes+1)
	bigArgs := `{"a":"` + strings.Repeat("x", MaxArgumentsBytes) + `"}`
	var manyCalls []string
	for range MaxToolCalls + 1 {
		manyCalls = append(manyCalls, `{"name":"t"}`)
	}
	rule := func(body string) string { return `{"version": 1, "rules": [` + body + `]}` }
	tests := []struct {
		name   string
		script string
		want   []string // substrings of the error
	}{
		{"empty file", ``, []string{"empty or truncated JSON"}},
		{"bad JSON", "{\"version\": 1,\n  \"rules\": [,]}", []string{"invalid JSON at line 2, column"}},
		{"truncated", `{"version": 1, "rules": [`, []string{"truncated"}},
		{"trailing data", `{"version": 1, "rules": [{"reply": {"content": "x"}}]} {}`, []string{"unexpected data after"}},
		{"not an object", `[1, 2]`, []string{"want an object"}},
		{"unknown top-level field", `{"version": 1, "rulez": []}`, []string{`unknown field "rulez"`}},
		{"unknown rule field", rule(`{"reply": {"content": "x"}}, {"name": "two", "whenn": {}}`), []string{`rule 2 ("two")`, `unknown field "whenn"`}},
		{"unknown when field", rule(`{"when": {"last_rol": "user"}, "reply": {"content": "x"}}`), []string{"rule 1", `unknown field "last_rol"`}},
		{"unknown reply field", rule(`{"reply": {"text": "x"}}`), []string{`unknown field "text"`}},
		{"unknown tool call field", rule(`{"reply": {"tool_calls": [{"name": "a", "args": {}}]}}`), []string{`unknown field "args"`}},
		{"wrong type", rule(`{"when": {"depth": "one"}, "reply": {"content": "x"}}`), []string{"depth", "string", "number"}},
		{"missing version", `{"rules": [{"reply": {"content": "x"}}]}`, []string{"version is missing"}},
		{"wrong version", `{"version": 2, "rules": [{"reply": {"content": "x"}}]}`, []string{"version = 2: must be 1"}},
		{"no rules", `{"version": 1, "rules": []}`, []string{"no rules"}},
		{"bad last_role", rule(`{"when": {"last_role": "robot"}, "reply": {"content": "x"}}`), []string{`when.last_role = "robot"`}},
		{"tool with other role", rule(`{"when": {"last_role": "user", "tool": "a"}, "reply": {"content": "x"}}`), []string{"when.tool"}},
		{"negative depth", rule(`{"when": {"depth": -1}, "reply": {"content": "x"}}`), []string{"when.depth = -1"}},
		{"negative turns", rule(`{"when": {"assistant_turns": -1}, "reply": {"content": "x"}}`), []string{"when.assistant_turns = -1"}},
		{"empty reply", rule(`{"when": {}, "reply": {}}`), []string{"reply is empty"}},
		{"finish_reason too long", rule(`{"when": {}, "reply": {"content": "x", "finish_reason": "` + strings.Repeat("l", 33) + `"}}`), []string{"reply.finish_reason is 33 bytes"}},
		{"negative usage", rule(`{"when": {}, "reply": {"content": "x", "usage": {"prompt_tokens": -1}}}`), []string{"reply.usage", "negative"}},
		{"error and content", rule(`{"reply": {"content": "x", "error": {"kind": "server"}}}`), []string{"reply.error excludes"}},
		{"unknown error kind", rule(`{"reply": {"error": {"kind": "oops"}}}`), []string{`reply.error.kind = "oops"`}},
		{"bad error status", rule(`{"reply": {"error": {"kind": "server", "status": 700}}}`), []string{"reply.error.status = 700"}},
		{"content too big", rule(`{"reply": {"content": "` + bigContent + `"}}`), []string{"reply.content is 65537 bytes"}},
		{"too many tool calls", rule(`{"reply": {"tool_calls": [` + strings.Join(manyCalls, ",") + `]}}`), []string{"17 calls"}},
		{"tool call without name", rule(`{"reply": {"tool_calls": [{"arguments": {}}]}}`), []string{"reply.tool_calls[0].name"}},
		{"tool name too long", rule(`{"reply": {"tool_calls": [{"name": "` + strings.Repeat("n", 65) + `"}]}}`), []string{"reply.tool_calls[0].name"}},
		{"arguments not an object", rule(`{"reply": {"tool_calls": [{"name": "a", "arguments": [1]}]}}`), []string{"must be a JSON object"}},
		{"arguments too big", rule(`{"reply": {"tool_calls": [{"name": "a", "arguments": ` + bigArgs + `}]}}`), []string{"reply.tool_calls[0].arguments are"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeScript(t, tt.script)
			_, err := New(config.Model{Provider: config.ProviderScripted, Script: path}, nil)
			if err == nil {
				t.Fatal("New accepted a bad script")
			}
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Errorf("error %q does not name the file %s", msg, path)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestScriptLimits(t *testing.T) {
	const oneRule = `{"when": {}, "reply": {"content": "x"}}`
	rules := func(n int) string {
		return `{"version": 1, "rules": [` + strings.TrimSuffix(strings.Repeat(oneRule+",", n), ",") + `]}`
	}
	// padded returns a valid script of exactly size bytes (trailing spaces
	// are insignificant JSON whitespace).
	padded := func(t *testing.T, size int) string {
		t.Helper()
		s := rules(1)
		if len(s) > size {
			t.Fatalf("base script is larger than %d", size)
		}
		return s + strings.Repeat(" ", size-len(s))
	}
	tests := []struct {
		name    string
		script  func(t *testing.T) string
		wantErr string // "" means accepted
	}{
		{"rules at the limit", func(*testing.T) string { return rules(MaxScriptRules) }, ""},
		{"rules past the limit", func(*testing.T) string { return rules(MaxScriptRules + 1) }, "1001 rules: at most 1000"},
		{"size at the limit", func(t *testing.T) string { return padded(t, MaxScriptBytes) }, ""},
		{"size past the limit", func(t *testing.T) string { return padded(t, MaxScriptBytes+1) }, "larger than the 1048576-byte limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeScript(t, tt.script(t))
			p, err := New(config.Model{Script: path}, nil)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				resp, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: "x"}}})
				if err != nil || resp.Message.Content != "x" {
					t.Fatalf("Complete = %+v, %v", resp, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error = %v, want one naming %s and containing %q", err, path, tt.wantErr)
			}
		})
	}
}

func TestScriptFileErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.json")
	_, err := New(config.Model{Script: missing}, nil)
	if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	_, err = New(config.Model{Script: t.TempDir()}, nil) // a directory
	if err == nil {
		t.Error("a directory was accepted as a script")
	}
}

func TestEmbeddedDefaultParses(t *testing.T) {
	s, err := parseScript(embeddedScriptName, []byte(defaultScript))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range s.rules {
		names = append(names, r.name)
	}
	// The rlm section first, then legacy, then the default (see doc.go).
	joined := strings.Join(names, "|")
	if !strings.HasPrefix(joined, "rlm: ") || !strings.HasSuffix(joined, "|default") || strings.Index(joined, "legacy: ") < strings.LastIndex(joined, "rlm: ") {
		t.Errorf("rule order %v: want rlm rules, then legacy rules, then the default", names)
	}
}

func FuzzScript(f *testing.F) {
	f.Add([]byte(defaultScript))
	f.Add([]byte(ruleKindsScript))
	f.Add([]byte(`{"version": 1, "rules": [{"when": {"tool": "a", "depth": 0}, "reply": {"error": {"kind": "server"}}}]}`))
	f.Add([]byte(`{"version": 1, "rules": [{"reply": {"tool_calls": [{"name": "a", "arguments": {"x": [1, {"y": null}]}}]}}]}`))
	f.Add([]byte(`{"version":1,"rules":[{"when":{"last_role":"tool","contains":"\u0000"},"reply":{"content":"\ud800"}}]}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	reqs := []Request{
		{Messages: []Message{{Role: RoleUser, Content: legacyPrompt("t", 1, 3)}}},
		{Depth: 1, Messages: []Message{
			{Role: RoleSystem, Content: "[rlm root]"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "a"}}},
			{Role: RoleTool, ToolCallID: "call_1", Content: "result"},
		}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseScript("fuzz", data)
		if err != nil {
			if s != nil {
				t.Fatal("a script and an error")
			}
			return
		}
		p := &scripted{s: s}
		for _, req := range reqs {
			resp, err := p.Complete(context.Background(), req)
			if err != nil {
				if KindOf(err) == 0 {
					t.Fatalf("untyped error %v", err)
				}
				continue
			}
			m := resp.Message
			if len(m.Content) > MaxContentBytes || len(m.ToolCalls) > MaxToolCalls {
				t.Fatalf("reply out of bounds: %d bytes, %d calls", len(m.Content), len(m.ToolCalls))
			}
			for _, tc := range m.ToolCalls {
				if tc.Name == "" || len(tc.Name) > MaxToolNameBytes || len(tc.Arguments) > MaxArgumentsBytes || !strings.HasPrefix(tc.ID, "call_") {
					t.Fatalf("tool call out of bounds: %+v", tc)
				}
			}
		}
	})
}

// TestReadmeExampleParses keeps the README's format example valid.
func TestReadmeExampleParses(t *testing.T) {
	data, err := os.ReadFile("../../examples/scripts/README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "```json\n")
	if start < 0 {
		t.Fatal("README has no json example")
	}
	rest := text[start+len("```json\n"):]
	end := strings.Index(rest, "```")
	if _, err := parseScript("README example", []byte(rest[:end])); err != nil {
		t.Errorf("the README's example script: %v", err)
	}
}
