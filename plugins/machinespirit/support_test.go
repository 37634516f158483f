package machinespirit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

const (
	testSwipl   = "/usr/bin/swipl"
	testVersion = "9.0.4"
)

// needSwipl skips a test on a machine without the pinned runtime; these
// tests run the real swipl.
func needSwipl(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(testSwipl); err != nil {
		t.Skipf("no %s: %v", testSwipl, err)
	}
}

// testSources are the trusted test handlers compiled into test workers.
func testSources(t testing.TB) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "test_registry.pl"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"test_registry.pl": b}
}

// testConfig is a config with the test handlers and the given operator
// graphs (name -> source), pinned. Its workers have the RLM's goal mode
// on, so that the hostile-goal tests run against the rlm_goals graph; a
// plugin's default is off (TestRLMGoalModeOffByDefault).
func testConfig(t testing.TB, graphs map[string]string) Config {
	t.Helper()
	cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion, extraSources: testSources(t), RLMGoalMode: true}
	if len(graphs) > 0 {
		dir := t.TempDir()
		cfg.GraphsDir = dir
		cfg.GraphPins = map[string]string{}
		for name, src := range graphs {
			if err := os.WriteFile(filepath.Join(dir, name+".pl"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte(src))
			cfg.GraphPins[name] = hex.EncodeToString(sum[:])
		}
	}
	return cfg
}

// newExecutor starts an executor whose preflight must pass.
func newExecutor(t testing.TB, cfg Config) *Executor {
	t.Helper()
	needSwipl(t)
	e := New(context.Background(), cfg)
	t.Cleanup(e.Close)
	if p := e.Describe().Runtime["preflight"]; p != "ok" {
		t.Fatalf("preflight: %s", p)
	}
	return e
}

// spec builds a task spec.
func spec(graph string, input any, contextFile string) []byte {
	ms := map[string]any{"graph": graph}
	if input != nil {
		ms["input"] = input
	}
	if contextFile != "" {
		ms["context_file"] = contextFile
	}
	b, err := json.Marshal(map[string]any{"goal": "test goal", "machinespirit": ms})
	if err != nil {
		panic(err)
	}
	return b
}

func stepReq(sp []byte, cp *sdk.Checkpoint) sdk.StepRequest {
	return sdk.StepRequest{
		TaskID: "t_test", RunID: 1, Attempt: 1, Spec: sp, Checkpoint: cp,
		Limits: sdk.Budgets{Depth: 1}, Remaining: sdk.Budgets{Depth: 1},
	}
}

// runToEnd steps until the task completes or fails, at most max steps.
func runToEnd(t *testing.T, e *Executor, host sdk.Host, sp []byte, cp *sdk.Checkpoint, max int) ([]sdk.StepResult, *sdk.Checkpoint) {
	t.Helper()
	var out []sdk.StepResult
	for i := 0; i < max; i++ {
		res, err := e.Step(context.Background(), host, stepReq(sp, cp))
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		out = append(out, res)
		if res.Checkpoint != nil {
			cp = res.Checkpoint
		}
		if res.Outcome != sdk.OutcomeContinue {
			return out, cp
		}
	}
	t.Fatalf("no end after %d steps", max)
	return nil, nil
}

// hostCall is one call the fake host served.
type hostCall struct {
	Kind   string // model, tool, approval, input, progress
	Name   string // tool name
	Args   map[string]any
	Key    string
	Prompt string // model: all messages, joined
	Depth  int
	Tools  []string // model: the tools offered
	Err    error
}

// fakeHost is an sdk.Host for tests. It enforces depth the way the host
// will: each model response carries a call token; a request naming a
// parent token is one deeper than that call; a call deeper than maxDepth
// is refused with ErrBudgetExhausted. Tools: workspace.read
// ({path, offset, limit} -> {content, size[, encoding]}) and
// workspace.write ({path, content} -> {written}) on an in-memory
// workspace, time.sleep ({seconds} -> {slept}), as host/tools defines them.
// The sdk.Host it is served through is an sdktest.Host scripted with these
// rules, so a call on an ended context is refused as the SDK refuses it.
type fakeHost struct {
	*sdktest.Host
	mu        sync.Mutex
	maxDepth  int
	tokens    map[string]int
	nextToken int
	workspace map[string]string
	calls     []hostCall
	// model answers a model call at a depth; nil answers "ok".
	model func(prompt string, depth int) (string, error)
	// reply, when set, answers a model call whole (tool calls included)
	// in place of model.
	reply func(req sdk.ModelRequest) sdk.Message
	// onTool runs before a tool call is served (e.g. to kill the worker).
	onTool   func(name string, args map[string]any)
	decision sdk.Decision
	// answer is the value every RequestInput gets; nil answers null.
	answer json.RawMessage
}

func newFakeHost(maxDepth int) *fakeHost {
	h := &fakeHost{maxDepth: maxDepth, tokens: map[string]int{}, workspace: map[string]string{}, decision: sdk.Approved}
	h.Host = &sdktest.Host{CallModelF: h.callModel, CallToolF: h.callTool, RequestApprovalF: h.requestApproval,
		RequestInputF: h.requestInput, ToolsF: h.tools, ProgressF: h.progress}
	return h
}

func (h *fakeHost) record(c hostCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

func (h *fakeHost) Calls() []hostCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hostCall(nil), h.calls...)
}

// count counts the successful calls of a kind (and tool name, if given).
func (h *fakeHost) count(kind, name string) int {
	n := 0
	for _, c := range h.Calls() {
		if c.Kind == kind && (name == "" || c.Name == name) && c.Err == nil {
			n++
		}
	}
	return n
}

func (h *fakeHost) callModel(ctx context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
	var parts []string
	for _, m := range req.Messages {
		parts = append(parts, m.Content)
	}
	prompt := strings.Join(parts, "\n")
	h.mu.Lock()
	depth := 0
	if req.ParentCallToken != "" {
		d, ok := h.tokens[req.ParentCallToken]
		if !ok {
			h.mu.Unlock()
			err := &sdk.HostError{Kind: sdk.ErrInvalidArgument, Message: "unknown parent call token"}
			h.record(hostCall{Kind: "model", Prompt: prompt, Err: err})
			return sdk.ModelResponse{}, err
		}
		depth = d + 1
	}
	if depth > h.maxDepth {
		h.mu.Unlock()
		err := &sdk.HostError{Kind: sdk.ErrBudgetExhausted, Message: fmt.Sprintf("depth %d exceeds max_depth %d", depth, h.maxDepth)}
		h.record(hostCall{Kind: "model", Prompt: prompt, Depth: depth, Err: err})
		return sdk.ModelResponse{}, err
	}
	h.nextToken++
	tok := fmt.Sprintf("call-%d", h.nextToken)
	h.tokens[tok] = depth
	model, reply := h.model, h.reply
	h.mu.Unlock()
	var tools []string
	for _, s := range req.Tools {
		tools = append(tools, s.Name)
	}
	if reply != nil {
		h.record(hostCall{Kind: "model", Prompt: prompt, Depth: depth, Tools: tools})
		return sdk.ModelResponse{Message: reply(req), CallToken: tok, Depth: int64(depth)}, nil
	}
	text := "ok"
	if model != nil {
		var err error
		if text, err = model(prompt, depth); err != nil {
			h.record(hostCall{Kind: "model", Prompt: prompt, Depth: depth, Err: err})
			return sdk.ModelResponse{}, err
		}
	}
	h.record(hostCall{Kind: "model", Prompt: prompt, Depth: depth})
	if err := ctx.Err(); err != nil {
		return sdk.ModelResponse{}, err
	}
	return sdk.ModelResponse{Message: sdk.Message{Role: "assistant", Content: text}, CallToken: tok, Depth: int64(depth)}, nil
}

func (h *fakeHost) callTool(ctx context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error) {
	var args map[string]any
	if err := json.Unmarshal([]byte(req.Arguments), &args); err != nil {
		return sdk.ToolResponse{}, &sdk.HostError{Kind: sdk.ErrInvalidArgument, Message: err.Error()}
	}
	if h.onTool != nil {
		h.onTool(req.Name, args)
	}
	c := hostCall{Kind: "tool", Name: req.Name, Args: args, Key: req.IdempotencyKey}
	var res any
	switch req.Name {
	case "workspace.read":
		path, _ := args["path"].(string)
		off, _ := args["offset"].(float64)
		lim, hasLimit := args["limit"].(float64)
		h.mu.Lock()
		content, ok := h.workspace[path]
		h.mu.Unlock()
		if !ok {
			c.Err = errors.New("no such file")
			h.record(c)
			return sdk.ToolResponse{Result: `"no such file"`, IsError: true}, nil
		}
		from := min(int(off), len(content))
		to := len(content) // no limit: to the end, as the host's tool
		if hasLimit {
			to = min(from+int(lim), len(content))
		}
		res = map[string]any{"content": content[from:to], "size": len(content)}
		if !utf8.ValidString(content[from:to]) {
			res = map[string]any{"content": base64.StdEncoding.EncodeToString([]byte(content[from:to])), "size": len(content), "encoding": "base64"}
		}
	case "workspace.write":
		path, _ := args["path"].(string)
		content, _ := args["content"].(string)
		h.mu.Lock()
		h.workspace[path] = content
		h.mu.Unlock()
		res = map[string]any{"written": len(content)}
	case "time.sleep":
		secs, _ := args["seconds"].(float64)
		select {
		case <-time.After(time.Duration(secs * float64(time.Second))):
		case <-ctx.Done():
			c.Err = ctx.Err()
			h.record(c)
			return sdk.ToolResponse{}, ctx.Err()
		}
		res = map[string]any{"slept": secs}
	default:
		c.Err = &sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: "unknown tool " + req.Name}
		h.record(c)
		return sdk.ToolResponse{}, c.Err
	}
	h.record(c)
	b, _ := json.Marshal(res)
	return sdk.ToolResponse{Result: string(b)}, nil
}

func (h *fakeHost) requestApproval(_ context.Context, prompt string) (sdk.Decision, error) {
	h.record(hostCall{Kind: "approval", Prompt: prompt})
	return h.decision, nil
}

func (h *fakeHost) requestInput(_ context.Context, question string) (json.RawMessage, error) {
	h.record(hostCall{Kind: "input", Prompt: question})
	if h.answer == nil {
		return json.RawMessage("null"), nil
	}
	return h.answer, nil
}

func (h *fakeHost) tools(context.Context) ([]sdk.ToolSpec, error) {
	return []sdk.ToolSpec{{Name: "workspace.read"}, {Name: "workspace.write"}, {Name: "time.sleep"}}, nil
}

func (h *fakeHost) progress(_ context.Context, note string) error {
	h.record(hostCall{Kind: "progress", Prompt: note})
	return nil
}

// payload decodes a checkpoint payload.
func payload(t *testing.T, cp *sdk.Checkpoint) map[string]any {
	t.Helper()
	if cp == nil {
		t.Fatal("no checkpoint")
	}
	if cp.Schema != CheckpointSchema {
		t.Fatalf("checkpoint schema %q", cp.Schema)
	}
	var m map[string]any
	if err := json.Unmarshal(cp.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// processAlive reports whether pid is a live (not zombie) process.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state is the field after the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
