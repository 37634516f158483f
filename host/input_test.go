package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// pendingApproval waits for id's pending approval.
func pendingApproval(t *testing.T, r *Runner, id string) store.Approval {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		list, err := r.Approvals(context.Background(), alice, store.ApprovalPending)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			if a.TaskID == id {
				return a
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("task %s never asked", id)
	return store.Approval{}
}

// An answer to an executor's question (RequestInput) is an approval effect
// of its step: the plugin dies right after the answer, and the re-run of
// the step after the resume gets the same value from the ledger without
// the question being asked again. Answers the runner refuses — over the
// bound, not JSON — leave the question pending and the task waiting.
func TestSeamInputAnswerReplayedAfterCrash(t *testing.T) {
	t.Parallel()
	s := newSeam(t, seamOptions{})
	var mu sync.Mutex
	got := map[int64]string{} // attempt → the value it received
	s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
		exe := newFakeExecutor()
		exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			out, err := s.l.lastServices().RequestInput(ctx, &pb.RequestInputRequest{TurnToken: req.TurnToken, Question: "What is x?\x1b[2K"})
			if err != nil {
				return plugin.StepResult{}, err
			}
			mu.Lock()
			got[req.Attempt] = out.GetValueJson()
			mu.Unlock()
			if req.Attempt == 1 {
				exe.exit(plugin.ExitStatus{Code: -1, Signal: "killed"})
				return plugin.StepResult{}, fmt.Errorf("%w: EOF", plugin.ErrConnectionLost)
			}
			return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "answered", Result: []byte(out.GetValueJson())}, nil
		}
		return exe, nil
	}
	ctx := context.Background()
	task, err := s.r.Create(ctx, alice, CreateRequest{Spec: []byte(`{"goal":"ask"}`)})
	if err != nil {
		t.Fatal(err)
	}
	a := pendingApproval(t, s.r, task.ID)
	if ApprovalKind(a) != ApprovalKindInput || a.Prompt != `What is x?\x1b[2K` {
		t.Fatalf("approval kind %s, prompt %q; want an input approval with the escaped question", ApprovalKind(a), a.Prompt)
	}
	if _, err := s.r.Approve(ctx, bob, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another principal's approve: %v, want not found", err)
	}
	for _, tc := range []struct {
		name, value, want string
	}{
		{"past the bound", `"` + strings.Repeat("x", MaxInputValue-1) + `"`, "value_json: the value is 65537 bytes, limit 65536"},
		{"not JSON", `{"x":`, "value_json: the value (5 bytes) is not one JSON value"},
		{"empty", ``, "value_json: the value (0 bytes) is not one JSON value"},
	} {
		var fe *plugin.FieldError
		if _, err := s.r.Answer(ctx, alice, a.ID, []byte(tc.value)); !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want a plugin.FieldError %q", tc.name, err, tc.want)
		}
	}
	if cur, err := s.r.Get(ctx, alice, task.ID); err != nil || cur.Status != store.StatusWaitingApproval {
		t.Fatalf("after refused answers the task is %s (%v)", cur.Status, err)
	}
	atBound := `{"x": 1}` + strings.Repeat(" ", MaxInputValue-len(`{"x": 1}`))
	if _, err := s.r.Answer(ctx, alice, a.ID, []byte(atBound)); err != nil {
		t.Fatalf("an answer at the bound: %v", err)
	}
	task = s.wait(t, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)

	if _, err := s.r.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	task = s.wait(t, task.ID)
	wantStatus(t, task, store.StatusCompleted, store.ReasonNone)
	if string(task.Result) != `{"x":1}` {
		t.Fatalf("result %s", task.Result)
	}
	mu.Lock()
	defer mu.Unlock()
	if got[1] != `{"x":1}` || got[2] != `{"x":1}` {
		t.Fatalf("answers per attempt %v; want the compact value in both", got)
	}
	all, err := s.r.Approvals(ctx, alice, "")
	if err != nil || len(all) != 1 {
		t.Fatalf("approvals %+v, %v: the question was asked again", all, err)
	}
}

// A value is refused on an approval that is not a question: it would be
// dropped unread. The approval stays pending.
func TestSeamValueOnYesNoApprovalRefused(t *testing.T) {
	t.Parallel()
	s := newSeam(t, seamOptions{})
	s.l.Exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
		if _, err := s.l.lastServices().RequestApproval(ctx, &pb.RequestApprovalRequest{TurnToken: req.TurnToken, Prompt: "May I?"}); err != nil {
			return plugin.StepResult{}, err
		}
		return done, nil
	}
	ctx := context.Background()
	task, err := s.r.Create(ctx, alice, CreateRequest{Spec: []byte(`{"goal":"ask"}`)})
	if err != nil {
		t.Fatal(err)
	}
	a := pendingApproval(t, s.r, task.ID)
	if ApprovalKind(a) != ApprovalKindApproval {
		t.Fatalf("kind %s", ApprovalKind(a))
	}
	var fe *plugin.FieldError
	if _, err := s.r.Answer(ctx, alice, a.ID, []byte(`1`)); !errors.As(err, &fe) || fe.Field != "value_json" || !strings.Contains(err.Error(), "takes no value") {
		t.Fatalf("a value on a yes/no approval: %v", err)
	}
	if _, err := s.r.Approve(ctx, alice, a.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s.wait(t, task.ID), store.StatusCompleted, store.ReasonNone)
}

// An input's answer reaches its step although the lease watch polls the
// store between resolve's commit and its hand-over: the watch sees the
// approval approved before the value arrives, and must leave an approved
// question to the host that holds its answer (answeredHere) instead of
// answering null first. The test takes resolve's two halves apart: the
// store's compare-and-set, a poll, then the hand-over.
func TestSeamInputAnswerSurvivesTheLeasePoll(t *testing.T) {
	t.Parallel()
	s := newSeam(t, seamOptions{})
	s.l.Exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
		out, err := s.l.lastServices().RequestInput(ctx, &pb.RequestInputRequest{TurnToken: req.TurnToken, Question: "Which branch?"})
		if err != nil {
			return plugin.StepResult{}, err
		}
		return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "answered", Result: []byte(out.GetValueJson())}, nil
	}
	ctx := context.Background()
	task, err := s.r.Create(ctx, alice, CreateRequest{Spec: []byte(`{"goal":"ask"}`)})
	if err != nil {
		t.Fatal(err)
	}
	a := pendingApproval(t, s.r, task.ID)
	if _, _, err := s.r.store.ResolveApproval(ctx, alice, a.ID, store.ApprovalApproved); err != nil {
		t.Fatal(err)
	}
	s.r.watchLeases()
	if !s.r.deliver(a.ID, resolution{status: store.ApprovalApproved, value: []byte(`"main"`)}) {
		t.Fatal("no step waits on the approval: the poll ended the wait")
	}
	task = s.wait(t, task.ID)
	wantStatus(t, task, store.StatusCompleted, store.ReasonNone)
	if string(task.Result) != `"main"` {
		t.Fatalf("the step was answered %s, want \"main\": the lease poll answered the question before resolve handed its value over", task.Result)
	}
}
