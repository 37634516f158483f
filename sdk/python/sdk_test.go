package python_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testwait"
)

// TestMain makes the test binary the plugins' confinement trampoline, as
// the daemon is.
func TestMain(m *testing.M) {
	confine.Main()
	os.Exit(m.Run())
}

// services is the host's end of a probe's calls, at the edge of the test:
// it answers each kind of call and records what the plugin sent.
type services struct {
	plugin.NoServices

	mu     sync.Mutex
	tokens []string
	tool   plugin.ToolCall
	model  plugin.ModelCall

	// inFlight counts the progress calls running; once gateAt are in, the
	// gate opens and every one returns. maxInFlight is the most seen.
	inFlight, maxInFlight, gateAt int
	gate                          chan struct{}
	inputCancelled                chan struct{} // closed when a blocked input call's ctx ended
}

func (s *services) token(t string) {
	s.mu.Lock()
	s.tokens = append(s.tokens, t)
	s.mu.Unlock()
}

func (s *services) Progress(ctx context.Context, tok, _ string) error {
	s.token(tok)
	if s.gate == nil {
		return nil
	}
	s.mu.Lock()
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	if s.inFlight == s.gateAt {
		close(s.gate)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-s.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *services) ListTools(_ context.Context, tok string) ([]tools.Spec, error) {
	s.token(tok)
	return []tools.Spec{{Name: "workspace.write", Description: "d", Parameters: "{}"}}, nil
}

func (s *services) CallModel(_ context.Context, c plugin.ModelCall) (plugin.ModelAnswer, error) {
	s.token(c.TurnToken)
	s.mu.Lock()
	s.model = c
	s.mu.Unlock()
	return plugin.ModelAnswer{Message: model.Message{Role: "assistant", Content: "hi", ToolCalls: []model.ToolCall{{ID: "c1", Name: "workspace.write", Arguments: `{"path":"a"}`}}},
		CallToken: "ct1", FinishReason: "tool_calls", Usage: model.Usage{PromptTokens: 7}}, nil
}

func (s *services) CallTool(_ context.Context, c plugin.ToolCall) (plugin.ToolAnswer, error) {
	s.token(c.TurnToken)
	if c.Name == "shell.run" {
		return plugin.ToolAnswer{}, plugin.Refuse(plugin.ErrBudgetExhausted, "tool calls: 0 left")
	}
	s.mu.Lock()
	s.tool = c
	s.mu.Unlock()
	return plugin.ToolAnswer{Output: `{"written":1}`}, nil
}

func (s *services) RequestApproval(_ context.Context, tok, _ string) error {
	s.token(tok)
	return nil
}

func (s *services) RequestInput(ctx context.Context, tok, q string) ([]byte, error) {
	s.token(tok)
	if q == "never answered" {
		<-ctx.Done()
		close(s.inputCancelled)
		return nil, ctx.Err()
	}
	return []byte(`{"n":3}`), nil
}

// probe launches the probe executor, pinned with its interpreter, as the
// daemon would, serving svc.
func probe(t *testing.T, svc plugin.Services) plugin.Executor {
	t.Helper()
	needPython(t)
	sdkDir, protoDir := stagedSDK(t)
	script := filepath.Join(sdkDir, "testdata", "probe.py")
	reg, err := plugin.NewRegistry(plugin.PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(t), "p")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	spec := plugin.PluginSpec{Kind: "probe", Path: script, Interpreter: python,
		Args: []string{"--pythonpath=" + sdkDir}, Confine: plugin.DefaultConfinement()}
	spec.Confine.ReadOnly = []string{sdkDir, protoDir}
	ctx := context.Background()
	if err := reg.Register(ctx, spec); err != nil {
		t.Fatal(err)
	}
	ec, err := reg.Launch(ctx, "probe", svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ec.Stop)
	return ec
}

func step(ctx context.Context, ec plugin.Executor, do string) (plugin.StepResult, error) {
	spec, _ := json.Marshal(map[string]any{"goal": "probe", "probe": map[string]any{"do": do}})
	return ec.Step(ctx, plugin.StepRequest{TaskID: "t1", RunID: 1, Attempt: 1, TurnToken: "tok", Spec: spec})
}

// Every kind of call travels on the step's stream and comes back typed;
// the host stamps each with the step's turn token; a refusal reaches the
// executor as a HostError of its kind.
func TestStepCallsRoundTrip(t *testing.T) {
	svc := &services{}
	ec := probe(t, svc)
	res, err := step(context.Background(), ec, "calls")
	if err != nil || res.Outcome != plugin.OutcomeComplete {
		t.Fatalf("step: %+v, %v\nstderr: %s", res, err, ec.StderrTail())
	}
	var seen map[string]any
	if err := json.Unmarshal(res.Result, &seen); err != nil {
		t.Fatal(err)
	}
	want := `{"approval":"approved","input":{"n":3},` +
		`"model":{"call_token":"ct1","content":"hi","finish":"tool_calls","prompt_tokens":7,"tool_calls":[["c1","workspace.write","{\"path\":\"a\"}"]]},` +
		`"refused":{"code":8,"kind":"budget_exhausted"},"tool":{"is_error":false,"result":"{\"written\":1}"},"tools":["workspace.write"]}`
	if got, _ := json.Marshal(seen); string(got) != want {
		t.Fatalf("the probe saw\n%s\nwant\n%s", got, want)
	}
	if svc.tool.Name != "workspace.write" || svc.tool.IdempotencyKey != "k1" || !svc.tool.Idempotent || string(svc.tool.Arguments) != `{"path":"a","content":"b"}` {
		t.Errorf("the host got the tool call %+v", svc.tool)
	}
	if len(svc.model.Messages) != 1 || svc.model.Messages[0].Content != "hello" || len(svc.model.Tools) != 1 {
		t.Errorf("the host got the model call %+v", svc.model)
	}
	if len(svc.tokens) != 7 {
		t.Errorf("%d calls reached the host, want 7", len(svc.tokens))
	}
	for _, tok := range svc.tokens {
		if tok != "tok" {
			t.Errorf("a call carried the turn token %q, want the step's", tok)
		}
	}
	if res.Checkpoint == nil || res.Checkpoint.Schema != "probe/1" {
		t.Errorf("checkpoint = %+v", res.Checkpoint)
	}
}

// 40 concurrent calls: the SDK keeps at most 32 in flight (the host would
// end the step as a crash at the 33rd), and all 40 are answered.
func TestStepCallsInFlightBound(t *testing.T) {
	svc := &services{gate: make(chan struct{}), gateAt: 32}
	ec := probe(t, svc)
	res, err := step(context.Background(), ec, "parallel_progress")
	if err != nil || res.Outcome != plugin.OutcomeComplete {
		t.Fatalf("step: %+v, %v\nstderr: %s", res, err, ec.StderrTail())
	}
	if string(res.Result) != `{"calls": 40, "errors": []}` {
		t.Fatalf("result %s", res.Result)
	}
	if svc.maxInFlight != 32 {
		t.Fatalf("%d calls were in flight at most, want exactly the bound 32", svc.maxInFlight)
	}
}

// Cancelling the step cancels its stream: the host's call in flight ends,
// the executor's blocked call raises Cancelled, and the process takes the
// next step.
func TestStepCancelled(t *testing.T) {
	svc := &services{inputCancelled: make(chan struct{})}
	ec := probe(t, svc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := step(ctx, ec, "block_input")
		done <- err
	}()
	testwait.Until(t, 10*time.Second, "the input call reaches the host", func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.tokens) == 1
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("step: %v, want the context's cancellation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled step did not return")
	}
	<-svc.inputCancelled
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ec.StderrTail(), "the step saw its cancellation") {
		if time.Now().After(deadline) {
			t.Fatalf("the step's cancellation is not in the plugin's log:\n%s", ec.StderrTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := step(context.Background(), ec, "nothing")
	if err != nil || res.Outcome != plugin.OutcomeComplete {
		t.Fatalf("the next step: %+v, %v\nstderr: %s", res, err, ec.StderrTail())
	}
}

// An uncaught exception crashes the process, like a Go panic, with its
// traceback in the stderr tail; an uncaught HostError fails the task; a
// result too large for a message fails it naming the result.
func TestStepFailures(t *testing.T) {
	for _, tc := range []struct {
		do            string
		crash         bool
		reason, inMsg string
	}{
		{"raise", true, "", "RuntimeError: probe: a bug"},
		{"host_error", false, "executor_failed", "budget_exhausted: CallTool: "},
		{"huge", false, "result_too_large", "result 5242880 bytes"},
	} {
		t.Run(tc.do, func(t *testing.T) {
			ec := probe(t, &services{})
			res, err := step(context.Background(), ec, tc.do)
			if tc.crash {
				if err == nil {
					t.Fatalf("step: %+v, want the broken stream of a crash", res)
				}
				<-ec.Exited()
				if st := ec.ExitStatus(); st.Code != 2 {
					t.Errorf("exit status %v, want 2", st)
				}
				if tail := ec.StderrTail(); !strings.Contains(tail, tc.inMsg) {
					t.Errorf("stderr tail lacks %q:\n%s", tc.inMsg, tail)
				}
				return
			}
			if err != nil || res.Outcome != plugin.OutcomeFail || res.Reason != tc.reason || !strings.Contains(res.Message, tc.inMsg) {
				t.Fatalf("step: %+v, %v; want fail %s with %q", res, err, tc.reason, tc.inMsg)
			}
		})
	}
}

// A plugin whose host process dies (its parent pid changes) exits by
// itself: the SDK polls its parent.
func TestOrphanExits(t *testing.T) {
	needPython(t)
	sdkDir, _ := stagedSDK(t)
	sock := testwait.ShortTempDir(t)
	// The shell is the plugin's "host": it starts the plugin and waits;
	// killing it orphans the plugin.
	sh := exec.Command("/bin/sh", "-c", `"$0" "$1" "$2" & wait`, python, filepath.Join(sdkDir, "testdata", "probe.py"), "--pythonpath="+sdkDir)
	sh.Env = []string{"TASKHOST_EXECUTOR_PLUGIN=7f3c1b0e-taskhost-executor", "PLUGIN_PROTOCOL_VERSIONS=2", "PLUGIN_UNIX_SOCKET_DIR=" + sock, "PATH=/usr/bin:/bin"}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no handshake line: %v", err)
	}
	// 1|2|unix|DIR/plugin-PID.sock|grpc
	fields := strings.Split(strings.TrimSpace(line), "|")
	if len(fields) != 5 || fields[0] != "1" || fields[1] != "2" || fields[2] != "unix" || fields[4] != "grpc" || filepath.Dir(fields[3]) != sock {
		t.Fatalf("handshake line %q", line)
	}
	pid := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(fields[3]), "plugin-"), ".sock")
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("handshake line %q: no pid in the socket's name", line)
	}
	t.Cleanup(func() {
		// Should the test fail, the plugin is still there: end it, if the
		// pid is still the probe's.
		if b, err := os.ReadFile("/proc/" + pid + "/cmdline"); err == nil && strings.Contains(string(b), "probe.py") {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	})
	if err := sh.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sh.Wait()
	testwait.Until(t, 10*time.Second, "the orphaned plugin "+pid+" exits", func() bool {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return true
		}
		// "pid (comm) S ...": a zombie has exited.
		s := string(b)
		return strings.Contains(s[strings.LastIndexByte(s, ')'):], ") Z ")
	})
}
