package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// A finished step's token and another task's token are refused alike.
func TestTurnTokenMisuseRefused(t *testing.T) {
	h := openHost(t, "", nil)
	r := h.Runner
	a := plugin.NewServicesServer(&taskServices{r: r, taskID: "t_a"})
	finished, _ := r.turns.issue(context.Background(), turn{taskID: "t_a", principal: alice, runID: 1, attempt: 1}, 1)
	r.turns.revoke(finished)
	other, _ := r.turns.issue(context.Background(), turn{taskID: "t_b", principal: alice, runID: 1, attempt: 1}, 1)
	defer r.turns.revoke(other)
	live, _ := r.turns.issue(context.Background(), turn{taskID: "t_a", principal: alice, runID: 1, attempt: 2}, 1)
	defer r.turns.revoke(live)
	ctx := context.Background()
	for name, tok := range map[string]string{"finished step": finished, "another task": other, "made up": "x", "empty": ""} {
		calls := map[string]error{}
		_, calls["CallModel"] = a.CallModel(ctx, &pb.CallModelRequest{TurnToken: tok})
		_, calls["CallTool"] = a.CallTool(ctx, &pb.CallToolRequest{TurnToken: tok})
		_, calls["RequestApproval"] = a.RequestApproval(ctx, &pb.RequestApprovalRequest{TurnToken: tok})
		_, calls["Progress"] = a.Progress(ctx, &pb.ProgressRequest{TurnToken: tok})
		_, calls["ListTools"] = a.ListTools(ctx, &pb.ListToolsRequest{TurnToken: tok})
		for method, err := range calls {
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s with the token of %s: %v, want PermissionDenied", method, name, err)
			}
		}
	}
	if _, err := a.ListTools(ctx, &pb.ListToolsRequest{TurnToken: live}); err != nil {
		t.Fatalf("a live token is refused: %v", err)
	}
}

func shellNoApproval(c *config.Config) {
	tl := c.Tools["shell.run"]
	tl.Approval = config.ApprovalNever
	c.Tools["shell.run"] = tl
}

func TestToolBudgetExhaustedAndNotReset(t *testing.T) {
	h := openHost(t, "", nil)
	sleep0 := map[string]any{"name": "time.sleep", "args": map[string]any{"seconds": 0}}
	task := create(t, h, alice, map[string]any{"steps": 5, "call_tool": sleep0}, Limits{ToolCalls: 2})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusFailed, store.ReasonToolBudgetExhausted)
	if b := task.Budgets.ToolCalls; b.Used != 2 || b.Limit != 2 {
		t.Fatalf("tool calls %d/%d, want 2/2", b.Used, b.Limit)
	}
	if task.Budgets.Steps.Used != 3 {
		t.Errorf("steps used %d, want 3 (the third step's tool call was refused)", task.Budgets.Steps.Used)
	}
	effs, err := h.Store.ListEffects(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(effs) != 2 {
		t.Fatalf("%d ledger rows, want 2: a refused effect is not recorded: %+v", len(effs), effs)
	}
}

// A tool whose policy needs approval waits with the task in
// waiting_approval; approving runs it, rejecting fails the task.
func TestApprovalGatedTool(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decide func(r *Runner, principal, id string) error
		want   store.Status
		reason store.Reason
		ran    bool
	}{
		{"approved", func(r *Runner, p, id string) error { _, err := r.Approve(context.Background(), p, id); return err }, store.StatusCompleted, "", true},
		{"rejected", func(r *Runner, p, id string) error { _, err := r.Reject(context.Background(), p, id); return err }, store.StatusFailed, store.ReasonApprovalRejected, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := openHost(t, "", nil)
			// The command runs in the task's workspace; the canary marks
			// where its text may go (the approval) and where not (events,
			// the ledger).
			const canary = "ran-canary-7d3f0b"
			command := "touch " + canary + "\necho \x1b[2K"
			te := map[string]any{"call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": command}}}
			task := create(t, h, alice, te, Limits{})
			a := waitApproval(t, h, alice, task.ID)
			if want := `touch ` + canary + `\necho \x1b[2K`; a.Tool != "shell.run" || a.Prompt != want {
				t.Errorf("approval tool %q prompt %q: want shell.run and the command escaped, %q", a.Tool, a.Prompt, want)
			}
			if err := tc.decide(h.Runner, alice, a.ID); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, waitEnd(t, h, alice, task.ID), tc.want, tc.reason)
			if _, err := os.Stat(filepath.Join(h.Runner.workspace(task.ID), canary)); (err == nil) != tc.ran {
				t.Errorf("tool ran = %v, want %v", err == nil, tc.ran)
			}
			// DESIGN §7: events never carry tool arguments; the ledger keeps
			// only a redacted summary.
			evs, err := h.Store.Events(context.Background(), alice, task.ID, 0, 1000)
			if err != nil || len(evs) == 0 {
				t.Fatalf("events: %d, %v", len(evs), err)
			}
			for _, ev := range evs {
				if strings.Contains(string(ev.Payload), "canary") || strings.Contains(string(ev.Payload), "touch") {
					t.Errorf("event %s carries the command: %s", ev.Type, ev.Payload)
				}
			}
			effs, err := h.Store.ListEffects(context.Background(), alice, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range effs {
				if strings.Contains(e.Summary, "canary") {
					t.Errorf("ledger row %+v carries the command", e)
				}
			}
			// Resolved exactly once.
			if _, err := h.Runner.Approve(context.Background(), alice, a.ID); !errors.Is(err, store.ErrConflict) {
				t.Errorf("second resolution: %v, want a conflict", err)
			}
			// Another principal cannot see or resolve it.
			if _, err := h.Runner.Approve(context.Background(), bob, a.ID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("bob approves alice's approval: %v, want not found", err)
			}
		})
	}
}

func TestApprovalTimeout(t *testing.T) {
	h := openHost(t, "", func(c *config.Config) { c.Approvals.TimeoutSeconds = 1 })
	task := create(t, h, alice, map[string]any{"request_approval": true}, Limits{})
	a := waitApproval(t, h, alice, task.ID)
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusFailed, store.ReasonApprovalTimeout)
	got, err := h.Store.GetApproval(context.Background(), alice, a.ID)
	if err != nil || got.Status != store.ApprovalExpired {
		t.Fatalf("approval %+v, %v: want expired", got, err)
	}
}

// Cancel while waiting for approval: the task is cancelled, the approval
// too, and it can no longer be approved; the tool never runs.
func TestCancelWhileWaitingForApproval(t *testing.T) {
	h := openHost(t, "", nil)
	// A confined command writes only in its workspace.
	task := create(t, h, alice, map[string]any{"call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": "touch ran"}}}, Limits{})
	marker := filepath.Join(h.Runner.workspace(task.ID), "ran")
	a := waitApproval(t, h, alice, task.ID)
	if _, err := h.Runner.Cancel(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCancelled, store.ReasonUserCancelled)
	if _, err := h.Runner.Approve(context.Background(), alice, a.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("approving a cancelled task's approval: %v, want a conflict", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the tool ran after its task was cancelled")
	}
}

// Cancel racing approve: whichever commits first wins; never approved and
// executed after cancel. An approved tool already running when the cancel
// lands is killed through its context.
func TestCancelRacesApprove(t *testing.T) {
	h := openHost(t, "", nil)
	const rounds = 25
	for i := range rounds {
		// A confined command writes only in its workspace.
		cmd := "echo $$ > ran.pid; touch ran; sleep 30"
		task := create(t, h, alice, map[string]any{"call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": cmd}}}, Limits{})
		marker := filepath.Join(h.Runner.workspace(task.ID), "ran")
		pidFile := marker + ".pid"
		a := waitApproval(t, h, alice, task.ID)
		errc := make(chan error, 1)
		go func() { _, err := h.Runner.Approve(context.Background(), alice, a.ID); errc <- err }()
		if i%3 == 0 {
			time.Sleep(time.Duration(i%5) * time.Millisecond) // vary who wins; not synchronisation
		}
		_, cerr := h.Runner.Cancel(context.Background(), alice, task.ID)
		aerr := <-errc
		final := waitEnd(t, h, alice, task.ID)
		if cerr != nil || final.Status != store.StatusCancelled {
			t.Fatalf("round %d: cancel %v, task %s", i, cerr, final.Status)
		}
		got, _ := h.Store.GetApproval(context.Background(), alice, a.ID)
		switch {
		case aerr == nil && got.Status == store.ApprovalApproved:
			// Approve won: the tool may have started; it must be dead now.
			if data, err := os.ReadFile(pidFile); err == nil {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
				waitGone(t, pid, 5*time.Second)
			}
		case errors.Is(aerr, store.ErrConflict) && got.Status == store.ApprovalCancelled:
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("round %d: the tool ran although the cancel won", i)
			}
		default:
			t.Fatalf("round %d: approve %v, approval %s", i, aerr, got.Status)
		}
	}
}

// An approval pending when the host dies is cancelled at restart and can no
// longer be approved.
func TestApprovalPendingAtRestartCancelled(t *testing.T) {
	dir := testwait.ShortTempDir(t)
	h, err := Open(context.Background(), Options{DataDir: dir, Config: testConfig(t), ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	task := create(t, h, alice, map[string]any{"request_approval": true}, Limits{})
	a := waitApproval(t, h, alice, task.ID)
	h.Close(context.Background())
	h2 := openHost(t, dir, nil)
	got, err := h2.Store.GetApproval(context.Background(), alice, a.ID)
	if err != nil || got.Status != store.ApprovalCancelled {
		t.Fatalf("approval after restart: %+v %v, want cancelled", got, err)
	}
	if _, err := h2.Runner.Approve(context.Background(), alice, a.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("approve after restart: %v, want a conflict", err)
	}
	tk, _ := h2.Runner.Get(context.Background(), alice, task.ID)
	if tk.Status != store.StatusInterrupted {
		t.Fatalf("task after restart: %s", tk.Status)
	}
}

// SIGKILL the plugin while shell.run runs: the tool's process group is
// gone, the effect is indeterminate and the next attempt is told.
func TestPluginKilledDuringToolEffect(t *testing.T) {
	h := openHost(t, "", shellNoApproval)
	dir := testwait.PluginDir(t)
	pluginPid := filepath.Join(dir, "plugin.pid")
	cmd := "sh -c 'echo $$ > tool.pid; sleep 300' & wait" // in the workspace: the command is confined to it
	task := create(t, h, alice, map[string]any{"pid_file": pluginPid, "call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": cmd}}}, Limits{})
	toolPid := filepath.Join(h.Runner.workspace(task.ID), "tool.pid")
	tool := readPid(t, toolPid)
	if err := syscallKill(readPid(t, pluginPid)); err != nil {
		t.Fatal(err)
	}
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	waitGone(t, tool, 10*time.Second)
	effs, err := h.Store.IndeterminateEffects(context.Background(), alice, task.ID)
	if err != nil || len(effs) != 1 || effs[0].Kind != store.EffectTool {
		all, _ := h.Store.ListEffects(context.Background(), alice, task.ID)
		t.Logf("ledger: %+v", all)
		t.Fatalf("indeterminate effects = %+v, %v; want the shell.run effect", effs, err)
	}
}

// waitApproval waits for the task's pending approval.
func waitApproval(t *testing.T, h *Host, principal, taskID string) store.Approval {
	t.Helper()
	var found store.Approval
	testwait.Until(t, 15*time.Second, "a pending approval", func() bool {
		as, err := h.Runner.Approvals(context.Background(), principal, store.ApprovalPending)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.TaskID == taskID {
				found = a
				return true
			}
		}
		return false
	})
	task, _ := h.Runner.Get(context.Background(), principal, taskID)
	if task.Status != store.StatusWaitingApproval {
		t.Fatalf("task is %s while its approval is pending", task.Status)
	}
	return found
}

func TestModelAndDepthBudgets(t *testing.T) {
	h := openHost(t, "", nil)
	cases := []struct {
		name   string
		te     map[string]any
		limits Limits
		reason store.Reason
		check  func(t *testing.T, b store.Budgets)
	}{
		{"model calls", map[string]any{"steps": 5, "model_calls": 1}, Limits{ModelCalls: 2}, store.ReasonModelBudgetExhausted,
			func(t *testing.T, b store.Budgets) {
				if b.ModelCalls.Used != 2 {
					t.Errorf("model calls used %d, want 2", b.ModelCalls.Used)
				}
			}},
		{"depth", map[string]any{"model_calls": 3, "model_chain": true}, Limits{Depth: 1}, store.ReasonDepthBudgetExhausted,
			func(t *testing.T, b store.Budgets) {
				if b.Depth.Used != 1 || b.ModelCalls.Used != 2 {
					t.Errorf("depth used %d, model calls %d; want 1 and 2 (the depth-2 call refused)", b.Depth.Used, b.ModelCalls.Used)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := create(t, h, alice, tc.te, tc.limits)
			task = waitEnd(t, h, alice, task.ID)
			wantStatus(t, task, store.StatusFailed, tc.reason)
			tc.check(t, task.Budgets)
		})
	}
}

// An executor claiming a parent call token it was never given gains
// nothing: the call is refused and no depth is charged.
func TestLyingExecutorCannotChooseDepth(t *testing.T) {
	h := openHost(t, "", nil)
	task := create(t, h, alice, map[string]any{"model_calls": 1, "parent_token": "forged-token"}, Limits{Depth: 1, Steps: 1})
	task = waitEnd(t, h, alice, task.ID)
	// The executor carries on after the refusal and never completes.
	wantStatus(t, task, store.StatusFailed, store.ReasonStepBudgetExhausted)
	atts, _ := h.Runner.Attempts(context.Background(), alice, task.ID)
	if len(atts) != 1 || atts[0].Summary != "model error: permission_denied" {
		t.Fatalf("attempts %+v: want the forged call refused", atts)
	}
	if task.Budgets.Depth.Used != 0 || task.Budgets.ModelCalls.Used != 0 {
		t.Fatalf("budgets %+v: a refused call charged something", task.Budgets)
	}
}

// A resume continues with what is left of the tool budget.
func TestResumeDoesNotResetToolBudget(t *testing.T) {
	h := openHost(t, "", nil)
	sleep0 := map[string]any{"name": "time.sleep", "args": map[string]any{"seconds": 0}}
	task := create(t, h, alice, map[string]any{"steps": 4, "call_tool": sleep0, "kill_at_attempt": 2}, Limits{ToolCalls: 2})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	if task.Budgets.ToolCalls.Used != 1 {
		t.Fatalf("tool calls used %d before resume, want 1", task.Budgets.ToolCalls.Used)
	}
	if _, err := h.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusFailed, store.ReasonToolBudgetExhausted)
	if b := task.Budgets.ToolCalls; b.Used != 2 || b.Limit != 2 {
		t.Fatalf("tool calls %d/%d after resume, want 2/2", b.Used, b.Limit)
	}
}

// The host's environment — an API key above all — never reaches a plugin.
func TestPluginEnvironmentIsAllowListed(t *testing.T) {
	const canary = "sk-canary-5f0e9a"
	t.Setenv("OPENAI_API_KEY", canary)
	t.Setenv("TASKHOST_SECRET_TEST", canary)
	h := openHost(t, "", nil)
	envFile := filepath.Join(testwait.PluginDir(t), "env")
	task := create(t, h, alice, map[string]any{"env_file": envFile}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	env := testwait.File(t, envFile)
	if strings.Contains(env, canary) {
		t.Fatalf("the plugin saw the canary:\n%s", env)
	}
	if !strings.Contains(env, "PATH=") {
		t.Fatalf("the plugin environment lacks PATH: the check above proves nothing\n%s", env)
	}
}

// A plugin that dies while its step waits for an approval: the task is
// interrupted and the approval cancelled — never approvable for a step
// that is gone.
func TestPluginCrashWhileWaitingCancelsApproval(t *testing.T) {
	h := openHost(t, "", nil)
	pidFile := filepath.Join(testwait.PluginDir(t), "pid")
	task := create(t, h, alice, map[string]any{"request_approval": true, "pid_file": pidFile}, Limits{})
	a := waitApproval(t, h, alice, task.ID)
	if err := syscallKill(readPid(t, pidFile)); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusInterrupted, store.ReasonExecutorCrashed)
	got, err := h.Store.GetApproval(context.Background(), alice, a.ID)
	if err != nil || got.Status != store.ApprovalCancelled {
		t.Fatalf("approval after the crash: %s %v, want cancelled", got.Status, err)
	}
	if _, err := h.Runner.Approve(context.Background(), alice, a.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("approve after the crash: %v, want a conflict", err)
	}
}
