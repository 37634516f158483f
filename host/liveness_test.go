package host

import (
	"context"
	"reflect"
	"testing"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// The liveness check interrupts a task only when two rounds in a row found
// it live in the same run with no run of the host holding it: a task whose
// run is live is never touched, one seen once (a start not registered yet,
// an end not unregistered yet) is only a suspect, and one resumed between
// the rounds (a new epoch) starts over as a suspect.
func TestLivenessCheckNeedsTwoSightings(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newSeam(t, seamOptions{launcher: func(l *fakeLauncher) {
		l.Exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "done"}, nil
		}
	}})
	defer close(release)
	ctx := context.Background()
	live, err := s.r.Create(ctx, alice, CreateRequest{Spec: []byte(`{"goal":"live"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Two tasks moved to running behind the runner's back, as a start
	// whose acknowledgement was lost leaves them.
	ghost := ghostTask(t, s.st, "t_ghost")
	moved := ghostTask(t, s.st, "t_moved")

	var lc livenessCheck
	if ids := lc.check(ctx, s.r); len(ids) != 0 {
		t.Fatalf("first round interrupted %v, want nothing", ids)
	}
	// t_moved gets a new epoch between the rounds.
	if _, err := s.st.Transition(ctx, store.Transition{PrincipalID: alice, TaskID: moved.ID, From: []store.Status{store.StatusRunning},
		To: store.StatusInterrupted, Reason: store.ReasonHostRestart}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.StartRun(ctx, alice, moved.ID, store.StatusInterrupted); err != nil {
		t.Fatal(err)
	}
	if ids := lc.check(ctx, s.r); !reflect.DeepEqual(ids, []string{ghost.ID}) {
		t.Fatalf("second round interrupted %v, want [%s]", ids, ghost.ID)
	}
	if ids := lc.check(ctx, s.r); !reflect.DeepEqual(ids, []string{moved.ID}) {
		t.Fatalf("third round interrupted %v, want [%s]", ids, moved.ID)
	}
	for id, want := range map[string]store.Status{live.ID: store.StatusRunning, ghost.ID: store.StatusInterrupted, moved.ID: store.StatusInterrupted} {
		got, err := s.st.GetTask(ctx, alice, id)
		if err != nil || got.Status != want {
			t.Errorf("task %s: %s (%s), %v; want %s", id, got.Status, got.Reason, err, want)
		}
		if want == store.StatusInterrupted && got.Reason != store.ReasonRunLost {
			t.Errorf("task %s interrupted %s, want run_lost", id, got.Reason)
		}
	}
}

// ghostTask creates a task and starts a run of it in the store alone.
func ghostTask(t *testing.T, st *store.Store, id string) store.Task {
	t.Helper()
	ctx := context.Background()
	b := store.Budget{Limit: 10}
	if _, err := st.CreateTask(ctx, store.NewTask{ID: id, PrincipalID: alice, Executor: fakeKind, Spec: []byte(`{"goal":"ghost"}`),
		Limits: store.Budgets{Steps: b, ToolCalls: b, ModelCalls: b, Depth: b, WallMillis: store.Budget{Limit: 60000}}}); err != nil {
		t.Fatal(err)
	}
	task, err := st.StartRun(ctx, alice, id, store.StatusPending)
	if err != nil {
		t.Fatal(err)
	}
	return task
}
