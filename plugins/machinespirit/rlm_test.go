package machinespirit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// bigContext is size bytes of ASCII filler with a needle at offset at.
func bigContext(size, at int, needle string) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "line %07d: nothing to see here, move along.\n", i)
	}
	s := b.String()[:size]
	return s[:at] + needle + s[at+len(needle):]
}

// scriptedModel answers RLM prompts: a root call at depth 0 gets the next
// reply of root, a root call at depth 1 (a sub-run's root) the next of
// subRoot, and an "[rlm sub]" call the answer of sub.
type scriptedModel struct {
	mu      sync.Mutex
	root    []string
	subRoot []string
	sub     func(prompt string) string
}

func (m *scriptedModel) answer(prompt string, depth int) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case strings.Contains(prompt, "[rlm sub]"):
		return m.sub(prompt), nil
	case strings.Contains(prompt, "[rlm root]") && depth == 0 && len(m.root) > 0:
		r := m.root[0]
		m.root = m.root[1:]
		return r, nil
	case strings.Contains(prompt, "[rlm root]") && depth == 1 && len(m.subRoot) > 0:
		r := m.subRoot[0]
		m.subRoot = m.subRoot[1:]
		return r, nil
	}
	return "", errors.New("the script has no answer for this prompt")
}

// rootPrompts are the prompts of the root calls at depth 0, in order.
func rootPrompts(h *fakeHost) []string {
	var out []string
	for _, c := range h.Calls() {
		if c.Kind == "model" && c.Depth == 0 && c.Err == nil && strings.Contains(c.Prompt, "[rlm root]") {
			out = append(out, c.Prompt)
		}
	}
	return out
}

const needle = "The secret code is 4217."

// TestRLMEndToEnd runs the rlm graph over a 1 MB context with a scripted
// model: the root model sees only metadata and slices it asks for, a
// sub-model call runs at depth 1, a sub-run's sub-call at depth 2 is
// refused with max_depth = 1, and the answer comes back.
func TestRLMEndToEnd(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	const at = 700_000
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = bigContext(size, at, needle)
	model := &scriptedModel{
		root: []string{
			"context_length(N)",
			"```prolog\ncontext_slice(700000, 64, S)\n```",
			`context_slice(699990, 200, S), string_concat("What is the secret code? ", S, P), llm_query(P, A)`,
			`spirit(rlm_goals, _{goal: "nested question"}, A)`,
			`final("4217")`,
		},
		subRoot: []string{
			`llm_query("one level too deep", A)`,
			`final("sub-run done")`,
		},
		sub: func(p string) string {
			if strings.Contains(p, needle) {
				return "4217"
			}
			return "unknown"
		},
	}
	h.model = model.answer
	e := newExecutor(t, testConfig(t, nil))
	results, _ := runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 12)

	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"answer":"4217"}` {
		t.Fatalf("last step %+v, result %s", last, last.Result)
	}
	if len(results) != 6 { // probe + 5 iterations
		t.Fatalf("%d steps, want 6", len(results))
	}

	const maxPrompt = 8 << 10
	var subDepths []int
	refusedDeep := false
	for _, c := range h.Calls() {
		if c.Kind != "model" {
			continue
		}
		if len(c.Prompt) > maxPrompt {
			t.Fatalf("a model prompt of %d bytes (at depth %d)", len(c.Prompt), c.Depth)
		}
		if strings.Contains(c.Prompt, "line 0012345") {
			t.Fatal("a prompt holds context the model did not ask for")
		}
		if strings.Contains(c.Prompt, "[rlm sub]") {
			if c.Err == nil {
				subDepths = append(subDepths, c.Depth)
			} else if c.Depth == 2 && errors.Is(c.Err, sdk.ErrBudgetExhausted) {
				refusedDeep = true
			}
		}
	}
	if len(subDepths) != 1 || subDepths[0] != 1 {
		t.Fatalf("successful sub-calls at depths %v, want [1]", subDepths)
	}
	if !refusedDeep {
		t.Fatal("the depth-2 sub-call was not refused")
	}
	// Bytes of context that crossed to the executor, ever: far below 1 MB.
	read := 0
	for _, c := range h.Calls() {
		if c.Kind == "tool" && c.Name == "workspace.read" {
			lim := int(c.Args["limit"].(float64))
			if lim > 4096 {
				t.Fatalf("a read of %d bytes", lim)
			}
			read += lim
		}
	}
	if read > 8<<10 {
		t.Fatalf("%d bytes of context read", read)
	}

	prompts := rootPrompts(h)
	if len(prompts) != 5 {
		t.Fatalf("%d root prompts", len(prompts))
	}
	for _, want := range []struct {
		turn int
		text string
	}{
		{1, "N = 1048576"},
		{2, "S = \"" + needle[:10]},
		{3, `A = "4217"`},
		{4, `A = "sub-run done"`},
	} {
		if !strings.Contains(prompts[want.turn], want.text) {
			t.Fatalf("root prompt %d lacks %q:\n%s", want.turn+1, want.text, prompts[want.turn])
		}
	}
	// The sub-run saw the refusal as an error it could react to.
	var subRootPrompts []string
	for _, c := range h.Calls() {
		if c.Kind == "model" && c.Depth == 1 && strings.Contains(c.Prompt, "[rlm root]") {
			subRootPrompts = append(subRootPrompts, c.Prompt)
		}
	}
	if len(subRootPrompts) != 2 || !strings.Contains(subRootPrompts[1], "budget_exhausted") {
		t.Fatalf("sub-run root prompts: %q", subRootPrompts)
	}
}

// TestRLMBounds: iterations are bounded (a model that never answers ends
// the task), and each reply is bounded.
func TestRLMBounds(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	t.Run("iterations", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = "x"
		h.model = func(string, int) (string, error) { return "true", nil }
		results, _ := runToEnd(t, e, h, spec("rlm_goals", map[string]any{"max_iterations": 3}, "ctx.txt"), nil, 10)
		last := results[len(results)-1]
		if last.Outcome != sdk.OutcomeFail || !strings.Contains(last.Message, "rlm_iterations_exhausted") {
			t.Fatalf("last step: %+v", last)
		}
		if n := len(rootPrompts(h)); n != 3 {
			t.Fatalf("%d root calls, want 3", n)
		}
	})
	for _, tc := range []struct {
		name  string
		reply string
		want  string
	}{
		{"reply at its bound", "X = \"" + strings.Repeat("a", 8192-6) + "\"", "X = \"aaa"},
		{"reply one past its bound", "X = \"" + strings.Repeat("a", 8192-5) + "\"", "the reply has 8193 characters; at most 8192"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(1)
			h.workspace["ctx.txt"] = "x"
			model := &scriptedModel{root: []string{tc.reply, `final("done")`}, sub: func(string) string { return "" }}
			h.model = model.answer
			runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 5)
			p := rootPrompts(h)
			if len(p) != 2 || !strings.Contains(p[1], tc.want) {
				t.Fatalf("feedback lacks %q: %q", tc.want, p)
			}
		})
	}
	t.Run("context slice bound", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = strings.Repeat("y", 10000)
		model := &scriptedModel{root: []string{"context_slice(0, 4096, S), string_length(S, L)", "context_slice(0, 4097, S)", `final("done")`}, sub: func(string) string { return "" }}
		h.model = model.answer
		runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 6)
		p := rootPrompts(h)
		if len(p) != 3 || !strings.Contains(p[1], "L = 4096") || !strings.Contains(p[2], "slice_length_at_most(4096)") {
			t.Fatalf("prompts: %q", p)
		}
	})
	t.Run("sub-model prompt bound", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = "x"
		ask := func(n int) string {
			return "length(L, " + strconv.Itoa(n) + "), maplist(=(0'a), L), string_codes(S, L), llm_query(S, A)"
		}
		model := &scriptedModel{root: []string{ask(6000), ask(6001), `final("done")`}, sub: func(string) string { return "sub answer" }}
		h.model = model.answer
		runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 6)
		p := rootPrompts(h)
		if len(p) != 3 || !strings.Contains(p[1], `A = "sub answer"`) || !strings.Contains(p[2], "prompt_of_at_most_chars(6000)") {
			t.Fatalf("prompts: %q", p)
		}
		if n := h.count("model", ""); n != 4 { // 3 root calls, 1 sub-call
			t.Fatalf("%d model calls", n)
		}
	})
	t.Run("a slice that cuts a character", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = "aé" + strings.Repeat("é", 10)
		model := &scriptedModel{root: []string{"context_slice(2, 5, S)", `final("done")`}, sub: func(string) string { return "" }}
		h.model = model.answer
		runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 5)
		if p := rootPrompts(h); len(p) != 2 || !strings.Contains(p[1], `S = "éé"`) {
			t.Fatalf("prompts: %q", p)
		}
	})
	t.Run("no context file", func(t *testing.T) {
		res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("rlm_goals", nil, ""), nil))
		if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, "context_file") {
			t.Fatalf("%+v, %v", res, err)
		}
	})
}

// TestRLMCheckpointHasNoTranscript: the checkpoint holds bounded state,
// not the conversation.
func TestRLMCheckpointHasNoTranscript(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = bigContext(1<<20, 10, needle)
	var replies []string
	for i := range 12 {
		replies = append(replies, fmt.Sprintf("context_slice(%d, 4096, S)", i*4096))
	}
	model := &scriptedModel{root: append(replies, `final("x")`), sub: func(string) string { return "" }}
	h.model = model.answer
	var maxCp int
	_, cp := runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 20)
	var m map[string]any
	if err := json.Unmarshal(cp.Payload, &m); err != nil {
		t.Fatal(err)
	}
	maxCp = len(cp.Payload)
	if maxCp > 6<<10 {
		t.Fatalf("checkpoint of %d bytes after 13 iterations", maxCp)
	}
	if recent := m["state"].(map[string]any)["recent"].([]any); len(recent) != 4 {
		t.Fatalf("recent keeps %d observations", len(recent))
	}
}
