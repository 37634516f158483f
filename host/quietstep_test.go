package host

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// A step skips the read of the task's unresolved effects only after an
// attempt that was told of none and recorded none. Here attempt 1 leaves
// one (a shell.run call the executor gave up on mid-command), attempt 2 is
// told of it and records nothing, and attempt 3 must still be told of it:
// the set is what the ledger holds, not what the last attempt did.
func TestSeamUnresolvedEffectToldToEveryLaterStep(t *testing.T) {
	t.Parallel()
	s := newShellSeam(t)

	giveUp := make(chan struct{})
	s.l.Exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
		switch req.Attempt {
		case 1:
			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := s.l.lastServices().CallTool(callCtx, &pb.CallToolRequest{TurnToken: req.TurnToken, Name: tools.ToolShellRun,
					ArgumentsJson: `{"command":"echo $$ > cmd.pid; exec sleep 300"}`})
				errc <- err
			}()
			select {
			case <-giveUp:
			case <-ctx.Done():
				return plugin.StepResult{}, ctx.Err()
			}
			cancel() // the executor gives up on its call mid-command
			<-errc
			return cont, nil
		case 2:
			return cont, nil
		}
		return done, nil
	}
	ctx := context.Background()
	task, err := s.r.Create(ctx, alice, CreateRequest{Spec: []byte(`{"goal":"quiet"}`)})
	if err != nil {
		t.Fatal(err)
	}
	readPid(t, filepath.Join(s.r.workspace(task.ID), "cmd.pid")) // the command runs
	close(giveUp)
	got := s.wait(t, task.ID)
	wantStatus(t, got, store.StatusCompleted, store.ReasonNone)

	effs, err := s.st.ListEffects(ctx, alice, task.ID)
	if err != nil || len(effs) != 1 || effs[0].Status != store.EffectIndeterminate || effs[0].Resolution != store.ResolutionUnsettled {
		t.Fatalf("ledger %+v, %v: want one unsettled indeterminate shell.run", effs, err)
	}
	reqs := s.l.Exe.stepRequests()
	if len(reqs) != 3 {
		t.Fatalf("%d steps, want 3", len(reqs))
	}
	for _, req := range reqs {
		want := 1
		if req.Attempt == 1 {
			want = 0
		}
		if len(req.Indeterminate) != want || (want == 1 && req.Indeterminate[0].Kind != string(store.EffectTool)) {
			t.Errorf("attempt %d was told of unresolved effects %+v, want %d tool effect(s)", req.Attempt, req.Indeterminate, want)
		}
	}
}
