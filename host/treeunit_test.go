package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/store"
)

// A child's share of its parent's budgets: what it asks (never more than
// the parent has left: at the limit it is allowed, one past refused), or
// the smaller of the default and half of what is left; the charge is the
// child's steps, tool and model calls; depth and wall are bounds only.
func TestSplitBudgets(t *testing.T) {
	t.Parallel()
	parent := store.Budgets{
		Steps: store.Budget{Limit: 20, Used: 1}, ToolCalls: store.Budget{Limit: 50, Used: 10},
		ModelCalls: store.Budget{Limit: 100}, Depth: store.Budget{Limit: 2}, WallMillis: store.Budget{Limit: 100_000, Used: 40_000},
		ModelTokens: store.Budget{Limit: 10_000, Used: 2_000}, OutputBytes: store.Budget{Limit: 1_000},
	}
	def := Limits{Steps: 20, ToolCalls: 50, ModelCalls: 100, Depth: 1, WallSeconds: 1800, ModelTokens: 1_000_000, OutputBytes: 64 << 20}
	cases := []struct {
		name      string
		req       Limits
		want      store.Budgets // limits
		wantField string        // a refusal naming this field
	}{
		{name: "defaults: half of what is left", req: Limits{},
			want: store.Budgets{Steps: store.Budget{Limit: 9}, ToolCalls: store.Budget{Limit: 20}, ModelCalls: store.Budget{Limit: 50}, Depth: store.Budget{Limit: 2}, WallMillis: store.Budget{Limit: 30_000},
				ModelTokens: store.Budget{Limit: 4_000}, OutputBytes: store.Budget{Limit: 500}}},
		{name: "all that is left", req: Limits{Steps: 19, ToolCalls: 40, ModelCalls: 100, Depth: 1, WallSeconds: 60, ModelTokens: 8_000, OutputBytes: 1_000},
			want: store.Budgets{Steps: store.Budget{Limit: 19}, ToolCalls: store.Budget{Limit: 40}, ModelCalls: store.Budget{Limit: 100}, Depth: store.Budget{Limit: 1}, WallMillis: store.Budget{Limit: 60_000},
				ModelTokens: store.Budget{Limit: 8_000}, OutputBytes: store.Budget{Limit: 1_000}}},
		{name: "one token past", req: Limits{ModelTokens: 8_001}, wantField: "max_model_tokens"},
		{name: "one output byte past", req: Limits{OutputBytes: 1_001}, wantField: "max_output_bytes"},
		{name: "one step past", req: Limits{Steps: 20}, wantField: "max_steps"},
		{name: "one tool call past", req: Limits{ToolCalls: 41}, wantField: "max_tool_calls"},
		{name: "one wall second past", req: Limits{WallSeconds: 61}, wantField: "max_wall_seconds"},
		{name: "negative", req: Limits{ModelCalls: -1}, wantField: "max_model_calls"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			child, charge, err := splitBudgets(parent, tc.req, def)
			if tc.wantField != "" {
				var fe *plugin.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantField {
					t.Fatalf("err %v, want a refusal of %s", err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if child != tc.want {
				t.Fatalf("child %+v, want %+v", child, tc.want)
			}
			if charge.Steps.Used != child.Steps.Limit || charge.ToolCalls.Used != child.ToolCalls.Limit ||
				charge.ModelCalls.Used != child.ModelCalls.Limit || charge.ModelTokens.Used != child.ModelTokens.Limit ||
				charge.OutputBytes.Used != child.OutputBytes.Limit || charge.Depth != (store.Budget{}) || charge.WallMillis != (store.Budget{}) {
				t.Fatalf("charge %+v for child %+v", charge, child)
			}
		})
	}
	// A parent with no step left cannot delegate.
	spent := parent
	spent.Steps.Used = spent.Steps.Limit
	var fe *plugin.FieldError
	if _, _, err := splitBudgets(spent, Limits{}, def); !errors.As(err, &fe) || fe.Field != "max_steps" {
		t.Fatalf("no steps left: %v", err)
	}
}

// A step is told of at most 64 children, each result cut to 1000
// characters: at the bound whole, one past cut.
func TestChildTasksBounds(t *testing.T) {
	t.Parallel()
	var tree []store.Task
	tree = append(tree, store.Task{ID: "root"})
	for i := range 65 {
		tree = append(tree, store.Task{ID: fmt.Sprintf("c%02d", i), ParentID: "root", Status: store.StatusCompleted})
	}
	tree[1].Result = []byte(strings.Repeat("é", maxChildResultChars))
	tree[2].Result = []byte(strings.Repeat("é", maxChildResultChars+1))
	got := childTasks(tree, "root")
	if len(got) != maxChildResults || got[0].TaskID != "c00" {
		t.Fatalf("%d children told, first %s; want %d from c00", len(got), got[0].TaskID, maxChildResults)
	}
	if n := utf8.RuneCountInString(got[0].Result); n != maxChildResultChars || got[0].Result != string(tree[1].Result) {
		t.Fatalf("result at the bound: %d characters", n)
	}
	if n := utf8.RuneCountInString(got[1].Result); n != maxChildResultChars {
		t.Fatalf("result one past the bound: %d characters, want %d", n, maxChildResultChars)
	}
}

// A task tool's arguments are bounded (16 KiB: at the bound parsed, one
// past refused) and its keys closed.
func TestTaskToolArgs(t *testing.T) {
	t.Parallel()
	mk := func(n int) json.RawMessage {
		pad := n - len(`{"goal":""}`)
		return json.RawMessage(`{"goal":"` + strings.Repeat("g", pad) + `"}`)
	}
	if _, err := tools.ParseTaskToolArgs(tools.ToolTaskDelegate, mk(tools.MaxTaskToolArgsBytes)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	var ae *tools.ArgError
	if _, err := tools.ParseTaskToolArgs(tools.ToolTaskDelegate, mk(tools.MaxTaskToolArgsBytes+1)); !errors.As(err, &ae) {
		t.Fatalf("one past the bound: %v", err)
	}
	if _, err := tools.ParseTaskToolArgs(tools.ToolTaskStatus, json.RawMessage(`{"task_id":"t","all":true}`)); !errors.As(err, &ae) {
		t.Fatalf("unknown argument: %v", err)
	}
}
