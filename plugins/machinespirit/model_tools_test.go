package machinespirit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// writeThenRead is a model that writes note.txt, reads it back, then
// answers with what it read.
func writeThenRead(req sdk.ModelRequest) sdk.Message {
	last := req.Messages[len(req.Messages)-1]
	tools := 0
	for _, m := range req.Messages {
		if m.Role == "tool" {
			tools++
		}
	}
	switch {
	case tools == 0:
		return sdk.Message{ToolCalls: []sdk.ToolCall{{ID: "c1", Name: "workspace.write", Arguments: `{"path":"note.txt","content":"hello"}`}}}
	case tools == 1:
		return sdk.Message{ToolCalls: []sdk.ToolCall{{Name: "workspace.read", Arguments: `{"path":"note.txt"}`}}}
	}
	return sdk.Message{Content: "  the note: " + last.Content + "  "}
}

// TestModelNodeTools: a model node's model calls the node's tools through
// the host (each a tool call of its own, keyed by its place), reads their
// results, and its final reply lands in the field; the rounds are bounded;
// a tool the host does not offer the task, or one the node does not name,
// is refused.
func TestModelNodeTools(t *testing.T) {
	t.Parallel()
	node := func(id, tools string) string {
		return g(id, `state([field(answer, string, "", replace)])`,
			fmt.Sprintf(`nodes([node(a, model("Note it: {{goal}}", answer, [tools(%s)]))])`, tools), okEdges, `output([answer])`)
	}
	eight := `['workspace.read', 'workspace.write', 'time.sleep', a1, a2, a3, a4, a5]`
	e := newExecutor(t, testConfig(t, map[string]string{
		"tooly":   node("tooly", `['workspace.write', "workspace.read"]`),
		"reader":  node("reader", `['workspace.read']`),
		"shelly":  node("shelly", `['shell.run']`),
		"eight":   node("eight", eight),
		"plainly": g("plainly", `state([field(answer, string, "", replace)])`, `nodes([node(a, model("q", answer))])`, okEdges),
	}))

	t.Run("write then read", func(t *testing.T) {
		h := newFakeHost(1)
		h.reply = writeThenRead
		res, err := e.Step(context.Background(), h, stepReq(spec("tooly", nil, ""), nil))
		if err != nil || res.Outcome != sdk.OutcomeComplete {
			t.Fatalf("%+v, %v", res, err)
		}
		if want := `{"answer":"the note: {\"content\":\"hello\",\"size\":5}"}`; string(res.Result) != want {
			t.Fatalf("result %s, want %s", res.Result, want)
		}
		if h.workspace["note.txt"] != "hello" {
			t.Fatalf("workspace %v", h.workspace)
		}
		var keys []string
		for _, c := range h.Calls() {
			switch c.Kind {
			case "model":
				if !slices.Equal(c.Tools, []string{"workspace.write", "workspace.read"}) || c.Depth != 0 {
					t.Fatalf("model call offered %v at depth %d", c.Tools, c.Depth)
				}
			case "tool":
				keys = append(keys, c.Key)
			}
		}
		if h.count("model", "") != 3 || !slices.Equal(keys, []string{"machinespirit:t_test:1:1.1", "machinespirit:t_test:1:1.2"}) {
			t.Fatalf("%d model calls, tool keys %q; want 3 and two keyed by place", h.count("model", ""), keys)
		}
	})

	t.Run("a model without tools is offered none", func(t *testing.T) {
		h := newFakeHost(1)
		h.reply = func(sdk.ModelRequest) sdk.Message { return sdk.Message{Content: "plain"} }
		res, err := e.Step(context.Background(), h, stepReq(spec("plainly", nil, ""), nil))
		if err != nil || string(res.Result) != `{"answer":"plain"}` || h.Calls()[0].Tools != nil {
			t.Fatalf("%+v, %v, %+v", res, err, h.Calls())
		}
	})

	t.Run("a tool the node does not name is told to the model", func(t *testing.T) {
		h := newFakeHost(1)
		h.reply = func(req sdk.ModelRequest) sdk.Message {
			if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
				return sdk.Message{Content: last.Content}
			}
			return sdk.Message{ToolCalls: []sdk.ToolCall{{ID: "x", Name: "workspace.write", Arguments: `{"path":"evil","content":"x"}`}}}
		}
		res, err := e.Step(context.Background(), h, stepReq(spec("reader", nil, ""), nil))
		if err != nil || string(res.Result) != `{"answer":"error: there is no tool \"workspace.write\" in this node"}` || h.count("tool", "") != 0 {
			t.Fatalf("%+v, %v; %d tool calls", res, err, h.count("tool", ""))
		}
	})

	t.Run("an answer in the last round", func(t *testing.T) {
		h := newFakeHost(1)
		h.reply = func(req sdk.ModelRequest) sdk.Message {
			if n := len(slices.DeleteFunc(slices.Clone(req.Messages), func(m sdk.Message) bool { return m.Role != "tool" })); n < maxToolRounds-1 {
				return sdk.Message{ToolCalls: []sdk.ToolCall{{ID: "r", Name: "workspace.read", Arguments: `{"path":"none"}`}}}
			}
			return sdk.Message{Content: "at last"}
		}
		res, err := e.Step(context.Background(), h, stepReq(spec("reader", nil, ""), nil))
		if err != nil || string(res.Result) != `{"answer":"at last"}` || h.count("model", "") != maxToolRounds || len(h.Calls()) != 2*maxToolRounds-1 {
			t.Fatalf("%+v, %v; %d model calls of %d", res, err, h.count("model", ""), len(h.Calls()))
		}
	})

	for _, tc := range []struct {
		name, graph, want string
		models, tools     int
	}{
		{"rounds bounded", "reader", "model_tool_rounds: the model still asked for tools after 8 model calls, the most one answer may take with tools", 8, 7},
		{"a tool the task may not call", "shelly", `"shell.run" is not a tool this task may call`, 0, 0},
		{"eight names compile; the host offers three", "eight", `"a1" is not a tool this task may call`, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(1)
			h.reply = func(sdk.ModelRequest) sdk.Message {
				return sdk.Message{ToolCalls: []sdk.ToolCall{{ID: "r", Name: "workspace.read", Arguments: `{"path":"none"}`}}}
			}
			res, err := e.Step(context.Background(), h, stepReq(spec(tc.graph, nil, ""), nil))
			if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, tc.want) {
				t.Fatalf("%+v, %v; want a failure with %q", res, err, tc.want)
			}
			if m, n := len(slices.DeleteFunc(h.Calls(), func(c hostCall) bool { return c.Kind != "model" })), len(slices.DeleteFunc(h.Calls(), func(c hostCall) bool { return c.Kind != "tool" })); m != tc.models || n != tc.tools {
				t.Fatalf("%d model and %d tool calls; want %d and %d", m, n, tc.models, tc.tools)
			}
		})
	}
}
