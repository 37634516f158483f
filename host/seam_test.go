package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/testwait"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// The seam tests drive the Runner through a fakeLauncher: every decision the
// host makes about a step's answer (classify, causeVerdict, finish, the
// budget override, recovery) is checked against a real store file, in
// milliseconds and without building or starting a plugin.

// seam is a Runner over a fresh store whose executors are fakes.
type seam struct {
	r  *Runner
	st *store.Store
	l  *fakeLauncher
}

type seamOptions struct {
	settings func(*Settings)
	svc      ServiceConfig
	launcher func(*fakeLauncher)
	dir      string // store directory; empty: a fresh temp dir
	limits   store.Limits
}

func newSeam(t *testing.T, o seamOptions) *seam {
	t.Helper()
	dir := o.dir
	if dir == "" {
		dir = t.TempDir()
	}
	st, err := store.Open(context.Background(), filepath.Join(dir, datadir.StoreFile), store.Options{Synchronous: "NORMAL", Limits: o.limits})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	set := DefaultSettings()
	set.DefaultExecutor = fakeKind
	if o.settings != nil {
		o.settings(&set)
	}
	l := &fakeLauncher{Exe: newFakeExecutor()}
	if o.launcher != nil {
		o.launcher(l)
	}
	r := NewRunner(st, l, make([]byte, 32), set, o.svc, t.TempDir(), hclog.NewNullLogger())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &seam{r: r, st: st, l: l}
}

// newShellSeam is a seam whose runner serves the default tools, with
// shell.run needing no approval.
func newShellSeam(t *testing.T) *seam {
	t.Helper()
	s := newSeam(t, seamOptions{})
	cfg := config.Default().Tools
	sh := cfg[tools.ToolShellRun]
	sh.Approval = config.ApprovalNever
	cfg[tools.ToolShellRun] = sh
	reg, err := tools.NewRegistry(cfg, s.r.workspaceRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	s.r.svc.Tools = reg
	return s
}

// run creates a task and waits for its run to end.
func (s *seam) run(t *testing.T, limits Limits) store.Task {
	t.Helper()
	task, err := s.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"seam"}`), Limits: limits})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return s.wait(t, task.ID)
}

func (s *seam) wait(t *testing.T, id string) store.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.r.Wait(ctx, id); err != nil {
		t.Fatalf("task %s did not end: %v", id, err)
	}
	task, err := s.r.Get(ctx, alice, id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func (s *seam) attempts(t *testing.T, id string) []store.Attempt {
	t.Helper()
	atts, err := s.r.Attempts(context.Background(), alice, id)
	if err != nil {
		t.Fatal(err)
	}
	return atts
}

// wantAttempt is what one attempt row must show; empty fields are not
// checked except Reason, which must match exactly.
type wantAttempt struct {
	status  store.AttemptStatus
	outcome string
	reason  store.Reason
	signal  string
}

func checkAttempts(t *testing.T, got []store.Attempt, want []wantAttempt) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d attempts %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Status != w.status || g.Reason != w.reason || (w.outcome != "" && g.Outcome != w.outcome) || g.ExitSignal != w.signal {
			t.Errorf("attempt %d = %s/%q/%s signal %q (%s), want %s/%q/%s signal %q",
				g.Number, g.Status, g.Outcome, g.Reason, g.ExitSignal, g.Message, w.status, w.outcome, w.reason, w.signal)
		}
		if g.EndedAt.IsZero() {
			t.Errorf("attempt %d is still open", g.Number)
		}
	}
}

// script makes a StepF answering attempt n with steps[n-1] (the last one
// for every later attempt).
func script(exe *fakeExecutor, steps ...func(ctx context.Context, exe *fakeExecutor, req plugin.StepRequest) (plugin.StepResult, error)) func(context.Context, plugin.StepRequest) (plugin.StepResult, error) {
	return func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
		i := min(int(req.Attempt), len(steps)) - 1
		return steps[i](ctx, exe, req)
	}
}

func answer(res plugin.StepResult) func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error) {
	return func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error) { return res, nil }
}

func failWith(err error) func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error) {
	return func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error) {
		return plugin.StepResult{}, err
	}
}

// dies simulates a plugin killed mid-step: the process is gone when the
// broken call returns.
func dies(st plugin.ExitStatus, err error) func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error) {
	return func(_ context.Context, exe *fakeExecutor, _ plugin.StepRequest) (plugin.StepResult, error) {
		exe.exit(st)
		return plugin.StepResult{}, err
	}
}

var (
	cont = plugin.StepResult{Outcome: plugin.OutcomeContinue, Summary: "went on"}
	done = plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "finished", Result: []byte(`{"ok":true}`)}
)

func checkpointOf(n int) *plugin.Checkpoint {
	return &plugin.Checkpoint{Schema: "fake/1", Payload: []byte(strings.Repeat("c", n))}
}

func TestSeamStepOutcomes(t *testing.T) {
	const cpMax, resMax = 64, 32
	unavailable := fmt.Errorf("%w: connection reset", plugin.ErrConnectionLost)
	cases := []struct {
		name    string
		limits  Limits
		steps   []func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error)
		launch  func(*fakeLauncher)
		status  store.Status
		reason  store.Reason
		message string // a substring of the task's message
		atts    []wantAttempt
		check   func(t *testing.T, s *seam, exe *fakeExecutor, task store.Task)
	}{
		{
			name:   "continue then complete",
			steps:  steps(answer(cont), answer(done)),
			status: store.StatusCompleted,
			atts:   []wantAttempt{{status: store.AttemptCompleted, outcome: "continue"}, {status: store.AttemptCompleted, outcome: "complete"}},
			check: func(t *testing.T, s *seam, exe *fakeExecutor, task store.Task) {
				if string(task.Result) != `{"ok":true}` || task.Budgets.Steps.Used != 2 {
					t.Errorf("result %s, steps used %d", task.Result, task.Budgets.Steps.Used)
				}
				reqs := exe.stepRequests()
				if len(reqs[1].Recent) != 1 || reqs[1].Recent[0].Text != "went " || reqs[1].TurnToken == reqs[0].TurnToken {
					t.Errorf("second request recent %+v, tokens %q %q", reqs[1].Recent, reqs[0].TurnToken, reqs[1].TurnToken)
				}
			},
		},
		{
			name:   "complete without a result",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeComplete})),
			status: store.StatusCompleted,
			atts:   []wantAttempt{{status: store.AttemptCompleted, outcome: "complete"}},
			check: func(t *testing.T, _ *seam, _ *fakeExecutor, task store.Task) {
				if len(task.Result) != 0 {
					t.Errorf("result = %q, want empty", task.Result)
				}
			},
		},
		{
			name:   "fail with a reason the host knows",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "no_progress", Message: "stuck"})),
			status: store.StatusFailed, reason: store.ReasonNoProgress, message: "stuck",
			atts: []wantAttempt{{status: store.AttemptFailed, outcome: "fail", reason: store.ReasonNoProgress}},
		},
		{
			name:   "fail with a reason the host does not know",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "bogus", Message: "stuck"})),
			status: store.StatusFailed, reason: store.ReasonExecutorFailed, message: `executor reason "bogus": stuck`,
			atts: []wantAttempt{{status: store.AttemptFailed, outcome: "fail", reason: store.ReasonExecutorFailed}},
		},
		{
			name:   "fail on a model outage interrupts",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "model_unavailable", Message: "503"})),
			status: store.StatusInterrupted, reason: store.ReasonModelUnavailable, message: "503",
			atts: []wantAttempt{{status: store.AttemptInterrupted, outcome: "fail", reason: store.ReasonModelUnavailable}},
		},
		{
			name:   "no outcome",
			steps:  steps(answer(plugin.StepResult{Summary: "?"})),
			status: store.StatusFailed, reason: store.ReasonExecutorFailed, message: "no outcome",
			atts: []wantAttempt{{status: store.AttemptFailed, reason: store.ReasonExecutorFailed}},
		},
		{
			name:   "plugin killed by a signal mid-step",
			steps:  steps(dies(plugin.ExitStatus{Code: -1, Signal: "killed"}, unavailable)),
			status: store.StatusInterrupted, reason: store.ReasonExecutorCrashed, message: "signal: killed",
			atts: []wantAttempt{{status: store.AttemptInterrupted, reason: store.ReasonExecutorCrashed, signal: "killed"}},
			check: func(t *testing.T, s *seam, _ *fakeExecutor, task store.Task) {
				if a := s.attempts(t, task.ID)[0]; a.StderrTail != "panic: boom" || a.ExitCode != -1 {
					t.Errorf("attempt stderr %q exit %d, want the plugin's tail and -1", a.StderrTail, a.ExitCode)
				}
			},
		},
		{
			name: "connection broke a moment before the exit",
			steps: steps(func(_ context.Context, exe *fakeExecutor, _ plugin.StepRequest) (plugin.StepResult, error) {
				// The broken call reaches the host before the wait status
				// does; the host waits for the exit (crashWait).
				time.AfterFunc(2*time.Millisecond, func() { exe.exit(plugin.ExitStatus{Code: 2}) })
				return plugin.StepResult{}, unavailable
			}),
			status: store.StatusInterrupted, reason: store.ReasonExecutorCrashed, message: "exit status 2",
			atts: []wantAttempt{{status: store.AttemptInterrupted, reason: store.ReasonExecutorCrashed}},
			check: func(t *testing.T, s *seam, _ *fakeExecutor, task store.Task) {
				if a := s.attempts(t, task.ID)[0]; a.ExitCode != 2 {
					t.Errorf("attempt exit code %d, want 2", a.ExitCode)
				}
			},
		},
		{
			name:   "plugin exited with a code, call failed otherwise",
			steps:  steps(dies(plugin.ExitStatus{Code: 3}, &plugin.StepCallError{Code: "Internal", Message: "stream closed"})),
			status: store.StatusInterrupted, reason: store.ReasonExecutorCrashed, message: "exit status 3",
			atts: []wantAttempt{{status: store.AttemptInterrupted, reason: store.ReasonExecutorCrashed}},
		},
		{
			name:   "step call failed with the plugin alive",
			steps:  steps(failWith(&plugin.StepCallError{Code: "Internal", Message: "bad frame"})),
			status: store.StatusFailed, reason: store.ReasonExecutorFailed, message: "step call failed",
			atts: []wantAttempt{{status: store.AttemptFailed, reason: store.ReasonExecutorFailed}},
		},
		{
			name: "checkpoint at the limit is kept and sent back",
			steps: steps(answer(plugin.StepResult{Outcome: plugin.OutcomeContinue, Checkpoint: checkpointOf(cpMax)}),
				answer(done)),
			status: store.StatusCompleted,
			atts:   []wantAttempt{{status: store.AttemptCompleted, outcome: "continue"}, {status: store.AttemptCompleted, outcome: "complete"}},
			check: func(t *testing.T, _ *seam, exe *fakeExecutor, _ store.Task) {
				if cp := exe.stepRequests()[1].Checkpoint; cp == nil || len(cp.Payload) != cpMax {
					t.Errorf("second step's checkpoint = %+v, want the %d-byte one", cp, cpMax)
				}
			},
		},
		{
			name:   "checkpoint one byte past the limit",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeContinue, Checkpoint: checkpointOf(cpMax + 1)})),
			status: store.StatusFailed, reason: store.ReasonCheckpointTooLarge, message: "checkpoint is 65 bytes, limit 64",
			atts: []wantAttempt{{status: store.AttemptFailed, outcome: "continue", reason: store.ReasonCheckpointTooLarge}},
		},
		{
			name:   "checkpoint of a schema the executor does not accept",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeContinue, Checkpoint: &plugin.Checkpoint{Schema: "other/9", Payload: []byte("x")}})),
			status: store.StatusFailed, reason: store.ReasonCheckpointIncompatible, message: `"other/9"`,
			atts: []wantAttempt{{status: store.AttemptFailed, outcome: "continue", reason: store.ReasonCheckpointIncompatible}},
		},
		{
			name:   "result at the limit",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeComplete, Result: []byte(`"` + strings.Repeat("r", resMax-2) + `"`)})),
			status: store.StatusCompleted,
			atts:   []wantAttempt{{status: store.AttemptCompleted, outcome: "complete"}},
		},
		{
			name:   "result one byte past the limit",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeComplete, Result: []byte(`"` + strings.Repeat("r", resMax-1) + `"`)})),
			status: store.StatusFailed, reason: store.ReasonResultTooLarge, message: "result is 33 bytes, limit 32",
			atts: []wantAttempt{{status: store.AttemptFailed, outcome: "complete", reason: store.ReasonResultTooLarge}},
		},
		{
			name:   "summary cut to summary_chars characters",
			steps:  steps(answer(plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "héllo wörld"})),
			status: store.StatusCompleted,
			atts:   []wantAttempt{{status: store.AttemptCompleted, outcome: "complete"}},
			check: func(t *testing.T, s *seam, _ *fakeExecutor, task store.Task) {
				if got := s.attempts(t, task.ID)[0].Summary; got != "héllo" {
					t.Errorf("summary = %q, want %q", got, "héllo")
				}
			},
		},
		{
			name:   "step budget runs out at the next claim",
			limits: Limits{Steps: 2},
			steps:  steps(answer(cont)),
			status: store.StatusFailed, reason: store.ReasonStepBudgetExhausted,
			atts: []wantAttempt{{status: store.AttemptCompleted, outcome: "continue"}, {status: store.AttemptCompleted, outcome: "continue"}},
			check: func(t *testing.T, _ *seam, _ *fakeExecutor, task store.Task) {
				if task.Budgets.Steps.Used != 2 {
					t.Errorf("steps used = %d, want 2", task.Budgets.Steps.Used)
				}
			},
		},
		{
			name: "launch fails",
			launch: func(l *fakeLauncher) {
				l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
					return nil, errors.New("fork/exec: no such file")
				}
			},
			status: store.StatusInterrupted, reason: store.ReasonExecutorUnavailable, message: "no such file",
		},
		{
			name: "plugin describes itself as another kind",
			launch: func(l *fakeLauncher) {
				l.Exe.DescribeF = func(context.Context) (plugin.Description, error) { return fakeDescription("other"), nil }
			},
			status: store.StatusInterrupted, reason: store.ReasonExecutorUnavailable, message: `describes itself as "other"`,
		},
		{
			name: "plugin reports a failed preflight",
			launch: func(l *fakeLauncher) {
				l.Exe.DescribeF = func(context.Context) (plugin.Description, error) {
					d := fakeDescription(fakeKind)
					d.Runtime = map[string]string{"preflight": "swipl missing"}
					return d, nil
				}
			},
			status: store.StatusInterrupted, reason: store.ReasonExecutorUnavailable, message: "swipl missing",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeam(t, seamOptions{
				settings: func(set *Settings) { set.CheckpointMaxBytes, set.ResultBytes, set.SummaryChars = cpMax, resMax, 5 },
				launcher: tc.launch,
			})
			exe := s.l.Exe
			exe.StderrTailText = "panic: boom"
			if tc.steps != nil {
				exe.StepF = script(exe, tc.steps...)
			}
			task := s.run(t, tc.limits)
			if task.Status != tc.status || task.Reason != tc.reason || !strings.Contains(task.Message, tc.message) {
				t.Fatalf("task %s (%s: %q), want %s (%s) with message containing %q", task.Status, task.Reason, task.Message, tc.status, tc.reason, tc.message)
			}
			checkAttempts(t, s.attempts(t, task.ID), tc.atts)
			if n := exe.stopCount(); tc.launch == nil && n != 1 {
				t.Errorf("executor stopped %d times, want once", n)
			}
			if tc.check != nil {
				tc.check(t, s, exe, task)
			}
		})
	}
}

func steps(s ...func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error)) []func(context.Context, *fakeExecutor, plugin.StepRequest) (plugin.StepResult, error) {
	return s
}

// blockingStep answers once ctx ends, as a plugin does when the host
// cancels its step, after closing started.
func blockingStep(started chan<- struct{}) func(context.Context, plugin.StepRequest) (plugin.StepResult, error) {
	var once sync.Once
	return func(ctx context.Context, _ plugin.StepRequest) (plugin.StepResult, error) {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return plugin.StepResult{}, status.FromContextError(ctx.Err()).Err()
	}
}

func TestSeamCancelledMidStep(t *testing.T) {
	cases := []struct {
		name    string
		stop    func(t *testing.T, s *seam, id string)
		status  store.Status
		reason  store.Reason
		attempt wantAttempt
	}{
		{
			name: "user cancel",
			stop: func(t *testing.T, s *seam, id string) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := s.r.Cancel(ctx, alice, id); err != nil {
					t.Fatalf("cancel: %v", err)
				}
			},
			status: store.StatusCancelled, reason: store.ReasonUserCancelled,
			attempt: wantAttempt{status: store.AttemptCancelled, reason: store.ReasonUserCancelled},
		},
		{
			name: "host stop",
			stop: func(t *testing.T, s *seam, _ string) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := s.r.Shutdown(ctx); err != nil {
					t.Fatalf("shutdown: %v", err)
				}
			},
			status: store.StatusInterrupted, reason: store.ReasonHostShutdown,
			attempt: wantAttempt{status: store.AttemptInterrupted, reason: store.ReasonHostShutdown},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeam(t, seamOptions{})
			started := make(chan struct{})
			s.l.Exe.StepF = blockingStep(started)
			task, err := s.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"seam"}`)})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the step never started")
			}
			tc.stop(t, s, task.ID)
			task = s.wait(t, task.ID)
			if task.Status != tc.status || task.Reason != tc.reason {
				t.Fatalf("task %s (%s: %s), want %s (%s)", task.Status, task.Reason, task.Message, tc.status, tc.reason)
			}
			checkAttempts(t, s.attempts(t, task.ID), []wantAttempt{tc.attempt})
			if n := s.l.Exe.stopCount(); n != 1 {
				t.Errorf("executor stopped %d times, want once", n)
			}
		})
	}
}

// fakeModel is a model.Provider with a function field.
type fakeModel struct {
	CompleteF func(ctx context.Context, req model.Request) (model.Response, error)
}

func (m fakeModel) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	if m.CompleteF != nil {
		return m.CompleteF(ctx, req)
	}
	return model.Response{Message: model.Message{Role: "assistant", Content: "ok"}}, nil
}

// callModel is a model call the way a plugin makes it, through the
// Services endpoint the step's process was given.
func callModel(ctx context.Context, svc pb.HostServicesServer, tok string) error {
	_, err := svc.CallModel(ctx, &pb.CallModelRequest{TurnToken: tok, Messages: []*pb.ChatMessage{{Role: "user", Content: "hi"}}})
	return err
}

func TestSeamEffectOverridesTheVerdict(t *testing.T) {
	outage := &model.Error{Kind: model.KindServer, Status: 503, Message: "overloaded"}
	cases := []struct {
		name     string
		model    fakeModel
		answer   plugin.StepResult
		wantCode codes.Code // of the step's last model call
		status   store.Status
		reason   store.Reason
		attempt  wantAttempt
	}{
		{
			name:     "model budget spent, executor goes on",
			answer:   cont,
			wantCode: codes.ResourceExhausted,
			status:   store.StatusFailed, reason: store.ReasonModelBudgetExhausted,
			attempt: wantAttempt{status: store.AttemptFailed, outcome: "continue", reason: store.ReasonModelBudgetExhausted},
		},
		{
			name:     "model budget spent, executor completes",
			answer:   done,
			wantCode: codes.ResourceExhausted,
			status:   store.StatusFailed, reason: store.ReasonModelBudgetExhausted,
			attempt: wantAttempt{status: store.AttemptFailed, outcome: "complete", reason: store.ReasonModelBudgetExhausted},
		},
		{
			name:     "model budget spent, executor fails with its own reason",
			answer:   plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "no_progress"},
			wantCode: codes.ResourceExhausted,
			status:   store.StatusFailed, reason: store.ReasonModelBudgetExhausted,
			attempt: wantAttempt{status: store.AttemptFailed, outcome: "fail", reason: store.ReasonModelBudgetExhausted},
		},
		{
			name:     "model outage, executor gives up",
			model:    fakeModel{CompleteF: func(context.Context, model.Request) (model.Response, error) { return model.Response{}, outage }},
			answer:   plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "executor_failed", Message: "model call failed"},
			wantCode: codes.Unavailable,
			status:   store.StatusInterrupted, reason: store.ReasonModelUnavailable,
			attempt: wantAttempt{status: store.AttemptInterrupted, outcome: "fail", reason: store.ReasonModelUnavailable},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeam(t, seamOptions{svc: ServiceConfig{Model: tc.model}})
			var code codes.Code
			s.l.Exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
				svc := s.l.lastServices()
				// One call fits the budget of one; the second is refused.
				for range 2 {
					if err := callModel(ctx, svc, req.TurnToken); err != nil {
						code = status.Code(err)
						break
					}
				}
				return tc.answer, nil
			}
			task := s.run(t, Limits{ModelCalls: 1})
			if code != tc.wantCode {
				t.Errorf("model call answered %v, want %v", code, tc.wantCode)
			}
			if task.Status != tc.status || task.Reason != tc.reason {
				t.Fatalf("task %s (%s: %s), want %s (%s)", task.Status, task.Reason, task.Message, tc.status, tc.reason)
			}
			checkAttempts(t, s.attempts(t, task.ID), []wantAttempt{tc.attempt})
			if task.Budgets.ModelCalls.Used != 1 {
				t.Errorf("model calls used = %d, want 1", task.Budgets.ModelCalls.Used)
			}
		})
	}
}

func TestSeamStaleTurnTokenRefused(t *testing.T) {
	s := newSeam(t, seamOptions{svc: ServiceConfig{Model: fakeModel{}}})
	var first string
	s.l.Exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
		if req.Attempt == 1 {
			first = req.TurnToken
			return cont, nil
		}
		// The first step's token died with its step.
		if err := callModel(ctx, s.l.lastServices(), first); status.Code(err) != codes.PermissionDenied {
			return plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "no_progress", Message: "stale token: " + status.Code(err).String()}, nil
		}
		return done, nil
	}
	task := s.run(t, Limits{})
	if task.Status != store.StatusCompleted {
		t.Fatalf("task %s (%s: %s), want completed: a stale turn token must be refused", task.Status, task.Reason, task.Message)
	}
	if task.Budgets.ModelCalls.Used != 0 {
		t.Errorf("model calls used = %d, want 0", task.Budgets.ModelCalls.Used)
	}
}

func TestSeamResumeWithNoStepLeft(t *testing.T) {
	s := newSeam(t, seamOptions{})
	s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
		exe := newFakeExecutor()
		exe.StepF = script(exe, dies(plugin.ExitStatus{Code: -1, Signal: "killed"}, fmt.Errorf("%w: EOF", plugin.ErrConnectionLost)))
		return exe, nil
	}
	task := s.run(t, Limits{Steps: 1})
	if task.Status != store.StatusInterrupted || task.Reason != store.ReasonExecutorCrashed {
		t.Fatalf("task %s (%s), want interrupted (executor_crashed)", task.Status, task.Reason)
	}
	if _, err := s.r.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	task = s.wait(t, task.ID)
	if task.Status != store.StatusFailed || task.Reason != store.ReasonStepBudgetExhausted || task.RunID != 2 {
		t.Fatalf("task %s (%s) run %d, want failed (step_budget_exhausted) in run 2", task.Status, task.Reason, task.RunID)
	}
	// The claim was refused: no attempt was charged beyond the crashed one.
	checkAttempts(t, s.attempts(t, task.ID), []wantAttempt{{status: store.AttemptInterrupted, reason: store.ReasonExecutorCrashed, signal: "killed"}})
}

func TestSeamRecoverAfterHostDeath(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	// A host that died mid-step left one task running with an open
	// attempt, and one pending that never started.
	st, err := store.Open(ctx, filepath.Join(dir, datadir.StoreFile), store.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	limits := store.Budgets{Steps: store.Budget{Limit: 5}, WallMillis: store.Budget{Limit: 60_000}}
	mk := func(id string) store.Task {
		task, err := st.CreateTask(ctx, store.NewTask{ID: id, PrincipalID: alice, Executor: fakeKind, Spec: []byte(`{"goal":"x"}`), Limits: limits},
			newEvent(EventTaskCreated, store.Task{ID: id, Executor: fakeKind, Status: store.StatusPending, Budgets: limits}, EventPayload{}))
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	running, pending := mk("t_running"), mk("t_pending")
	next := running
	next.Status, next.RunID = store.StatusRunning, 1
	if running, err = st.StartRun(ctx, alice, running.ID, store.StatusPending, newEvent(EventTaskStarted, next, EventPayload{})); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ClaimAttempt(ctx, alice, running.ID, running.RunID); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	s := newSeam(t, seamOptions{dir: dir, settings: func(set *Settings) { set.Heartbeat = 2 * time.Second }})
	rec, err := s.r.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Interrupted) != 1 || rec.Interrupted[0] != running.ID || rec.AttemptsClosed != 1 {
		t.Fatalf("recovery = %+v, want only %s interrupted and one attempt closed", rec, running.ID)
	}
	got := s.wait(t, running.ID)
	if got.Status != store.StatusInterrupted || got.Reason != store.ReasonHostRestart {
		t.Fatalf("task %s (%s), want interrupted (host_restart)", got.Status, got.Reason)
	}
	// The lost heartbeat interval is charged in full.
	if got.Budgets.WallMillis.Used != 2000 {
		t.Errorf("wall used = %d ms, want the 2000 ms heartbeat charged", got.Budgets.WallMillis.Used)
	}
	checkAttempts(t, s.attempts(t, running.ID), []wantAttempt{{status: store.AttemptInterrupted, reason: store.ReasonHostRestart}})
	if p := s.wait(t, pending.ID); p.Status != store.StatusPending {
		t.Errorf("pending task became %s", p.Status)
	}
	// Nothing resumed on its own; a resume runs it again as run 2.
	if n := len(s.l.Exe.stepRequests()); n != 0 {
		t.Fatalf("%d steps ran before any resume", n)
	}
	if _, err := s.r.Resume(ctx, alice, running.ID); err != nil {
		t.Fatal(err)
	}
	got = s.wait(t, running.ID)
	if got.Status != store.StatusCompleted || got.RunID != 2 {
		t.Fatalf("after resume: %s run %d, want completed in run 2", got.Status, got.RunID)
	}
	// The resume found the pending task ahead of it in the queue: that one
	// started first, in its turn, as the never-started task it is. Its run
	// may still be ending: wait for it before counting its step.
	testwait.Until(t, 10*time.Second, "the queued task to complete", func() bool {
		p, err := s.r.Get(ctx, alice, pending.ID)
		return err == nil && p.Status == store.StatusCompleted
	})
	s.wait(t, pending.ID)
	var resumed, started int
	for _, req := range s.l.Exe.stepRequests() {
		switch {
		case req.TaskID == running.ID && req.Attempt == 2 && req.RunID == 2:
			resumed++
		case req.TaskID == pending.ID && req.Attempt == 1 && req.RunID == 1:
			started++
		default:
			t.Errorf("unexpected step request %+v", req)
		}
	}
	if resumed != 1 || started != 1 {
		t.Errorf("step requests: %d of the resumed task's attempt 2, %d of the queued task's attempt 1; want one each", resumed, started)
	}
}

// TestClassify checks classify's table without a store: what each answer
// of a step — and each way its call can fail — comes to.
func TestClassify(t *testing.T) {
	type want struct {
		attempt store.AttemptStatus
		taskTo  store.Status
		reason  store.Reason
		crashed bool
		message string
	}
	killed := &plugin.ExitStatus{Code: -1, Signal: "killed"}
	cases := []struct {
		name   string
		res    plugin.StepResult
		err    error
		cause  error
		exited *plugin.ExitStatus // the process is gone before classify runs
		want   want
	}{
		{name: "continue", res: cont, want: want{attempt: store.AttemptCompleted}},
		{name: "complete", res: plugin.StepResult{Outcome: plugin.OutcomeComplete}, want: want{attempt: store.AttemptCompleted, taskTo: store.StatusCompleted}},
		{name: "fail known", res: plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "approval_rejected"},
			want: want{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonApprovalRejected}},
		{name: "fail unknown reason cut to 64 bytes", res: plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: strings.Repeat("x", 65)},
			want: want{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonExecutorFailed, message: `"` + strings.Repeat("x", 64) + `"`}},
		{name: "fail model_unavailable", res: plugin.StepResult{Outcome: plugin.OutcomeFail, Reason: "model_unavailable"},
			want: want{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonModelUnavailable}},
		{name: "unknown outcome", res: plugin.StepResult{Outcome: plugin.Outcome(7)},
			want: want{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonExecutorFailed, message: "no outcome"}},
		{name: "checkpoint at the limit", res: plugin.StepResult{Outcome: plugin.OutcomeContinue, Checkpoint: checkpointOf(8)},
			want: want{attempt: store.AttemptCompleted}},
		{name: "checkpoint past the limit", res: plugin.StepResult{Outcome: plugin.OutcomeContinue, Checkpoint: checkpointOf(9)},
			want: want{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonCheckpointTooLarge, message: "9 bytes, limit 8"}},
		{name: "result at the limit", res: plugin.StepResult{Outcome: plugin.OutcomeComplete, Result: []byte("1234")},
			want: want{attempt: store.AttemptCompleted, taskTo: store.StatusCompleted}},
		{name: "result past the limit", res: plugin.StepResult{Outcome: plugin.OutcomeComplete, Result: []byte("12345")},
			want: want{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonResultTooLarge, message: "5 bytes, limit 4"}},
		{name: "process gone, call unavailable", err: fmt.Errorf("%w: EOF", plugin.ErrConnectionLost), exited: killed,
			want: want{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonExecutorCrashed, crashed: true, message: "signal: killed"}},
		// A plugin that died while the host was cancelling its step
		// crashed: the crash, not the cancel, is what the attempt records.
		// A plugin that broke the protocol is treated as crashed though
		// its process lives: the run ends and the plugin with it.
		{name: "protocol error, process alive", err: fmt.Errorf("%w: call id 3 repeated", plugin.ErrProtocol),
			want: want{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonExecutorCrashed, crashed: true, message: "broke the protocol"}},
		{name: "process gone during a user cancel", err: fmt.Errorf("step: %w", context.Canceled), cause: errUserCancelled, exited: killed,
			want: want{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonExecutorCrashed, crashed: true}},
		{name: "user cancel", err: fmt.Errorf("step: %w", context.Canceled), cause: errUserCancelled,
			want: want{attempt: store.AttemptCancelled, reason: store.ReasonUserCancelled}},
		{name: "host stop", err: fmt.Errorf("step: %w", context.Canceled), cause: errShutdown,
			want: want{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonHostShutdown}},
		{name: "wall clock ran out", err: fmt.Errorf("step: %w", context.DeadlineExceeded), cause: errWallExceeded,
			want: want{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonWallClockExceeded}},
		{name: "call failed, process alive", err: &plugin.StepCallError{Code: "Internal", Message: strings.Repeat("e", 2000)},
			want: want{attempt: store.AttemptFailed, taskTo: store.StatusFailed, reason: store.ReasonExecutorFailed, message: "step call failed"}},
	}
	set := DefaultSettings()
	set.CheckpointMaxBytes, set.ResultBytes = 8, 4
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exe := newFakeExecutor()
			if tc.exited != nil {
				exe.exit(*tc.exited)
			}
			ru := &run{r: &Runner{set: set}, exe: exe, desc: fakeDescription(fakeKind)}
			v := ru.classify(tc.res, tc.err, tc.cause)
			got := want{attempt: v.attempt, taskTo: v.taskTo, reason: v.reason, crashed: v.crashed, message: tc.want.message}
			if got != tc.want || !strings.Contains(v.message, tc.want.message) {
				t.Fatalf("verdict %+v (message %q), want %+v", got, v.message, tc.want)
			}
			if len(v.message) > 2000 {
				t.Errorf("message is %d bytes, past the 2000 bound", len(v.message))
			}
		})
	}
}

// TestCauseVerdict checks what each cause of a cancelled step context means
// for the attempt and the task.
func TestCauseVerdict(t *testing.T) {
	cases := []struct {
		cause     error
		attempt   store.AttemptStatus
		taskTo    store.Status
		reason    store.Reason
		abandoned bool
	}{
		{errUserCancelled, store.AttemptCancelled, "", store.ReasonUserCancelled, false},
		{fmt.Errorf("wrapped: %w", errUserCancelled), store.AttemptCancelled, "", store.ReasonUserCancelled, false},
		{errApprovalRejected, store.AttemptFailed, "", store.ReasonApprovalRejected, true},
		{errApprovalExpired, store.AttemptFailed, "", store.ReasonApprovalTimeout, true},
		{errWallExceeded, store.AttemptFailed, store.StatusFailed, store.ReasonWallClockExceeded, false},
		{errShutdown, store.AttemptInterrupted, store.StatusInterrupted, store.ReasonHostShutdown, false},
		{errors.New("anything else"), store.AttemptInterrupted, store.StatusInterrupted, store.ReasonHostShutdown, false},
	}
	for _, tc := range cases {
		t.Run(tc.cause.Error(), func(t *testing.T) {
			v := causeVerdict(tc.cause)
			if v.attempt != tc.attempt || v.taskTo != tc.taskTo || v.reason != tc.reason || v.abandoned != tc.abandoned {
				t.Fatalf("verdict %s/%q/%s abandoned=%v, want %s/%q/%s abandoned=%v",
					v.attempt, v.taskTo, v.reason, v.abandoned, tc.attempt, tc.taskTo, tc.reason, tc.abandoned)
			}
		})
	}
}
