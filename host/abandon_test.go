package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// An executor gives up an unsettled effect with AbandonEffect: until then
// its re-issue is refused; an abandon names an effect the task left
// unsettled (anything else is InvalidArgument, twice included) and is
// recorded, with who gave it up, in the ledger and the events; a call
// issued after it is a new call under its tool's policy.
func TestSeamAbandonEffect(t *testing.T) {
	t.Parallel()
	appendLine := `{"path":"log.txt","content":"line\n","append":true}`
	dir := t.TempDir()
	s := newSeam(t, seamOptions{dir: dir})
	reg, err := tools.NewRegistry(config.Default().Tools, s.r.workspaceRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	s.r.svc.Tools = reg
	codesSeen := map[string]codes.Code{}
	s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
		exe := newFakeExecutor()
		exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			svc := s.l.lastServices()
			call := func() codes.Code {
				_, err := svc.CallTool(ctx, &pb.CallToolRequest{TurnToken: req.TurnToken, Name: tools.ToolWorkspaceWrite, ArgumentsJson: appendLine})
				return status.Code(err)
			}
			abandon := func(attempt, seq uint32) codes.Code {
				_, err := svc.AbandonEffect(ctx, &pb.AbandonEffectRequest{TurnToken: req.TurnToken, Attempt: attempt, Seq: seq})
				return status.Code(err)
			}
			if req.Attempt == 1 {
				call()
				exe.exit(plugin.ExitStatus{Code: -1, Signal: "killed"})
				return plugin.StepResult{}, fmt.Errorf("%w: EOF", plugin.ErrConnectionLost)
			}
			if len(req.Indeterminate) != 1 {
				t.Errorf("attempt 2 is told %+v, want the append", req.Indeterminate)
				return done, nil
			}
			e := req.Indeterminate[0]
			codesSeen["re-issue before"] = call()
			codesSeen["unknown effect"] = abandon(uint32(e.Attempt), uint32(e.Seq)+7)
			codesSeen["zero attempt"] = abandon(0, uint32(e.Seq))
			_, err := svc.AbandonEffect(ctx, &pb.AbandonEffectRequest{TurnToken: "forged", Attempt: uint32(e.Attempt), Seq: uint32(e.Seq)})
			codesSeen["forged token"] = status.Code(err)
			codesSeen["abandon"] = abandon(uint32(e.Attempt), uint32(e.Seq))
			codesSeen["abandon twice"] = abandon(uint32(e.Attempt), uint32(e.Seq))
			codesSeen["re-issue after"] = call()
			return done, nil
		}
		return exe, nil
	}
	ctx := context.Background()
	task := s.run(t, Limits{})
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	// The crash came after the append and before its observation was
	// written: the line is there, the ledger cannot know it.
	db := rawStore(t, dir)
	if _, err := db.Exec(`UPDATE effects SET status = 'indeterminate', result = NULL, resolution = 'unsettled' WHERE task_id = ?`, task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.r.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	task = s.wait(t, task.ID)
	wantStatus(t, task, store.StatusCompleted, store.ReasonNone)
	for name, want := range map[string]codes.Code{
		"re-issue before": codes.FailedPrecondition, "unknown effect": codes.InvalidArgument, "zero attempt": codes.InvalidArgument,
		"forged token": codes.PermissionDenied, "abandon": codes.OK, "abandon twice": codes.InvalidArgument, "re-issue after": codes.OK,
	} {
		if got := codesSeen[name]; got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(s.r.workspace(task.ID), "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// The first run's line was rolled back with its attempt (the resume
	// starts from the last committed step's workspace): the new call's
	// is the one line.
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Errorf("%d lines written, want 1: the new call's after the abandon, the dead attempt's rolled back", n)
	}
	hist, err := s.st.UnsettledHistory(ctx, alice, task.ID)
	if err != nil || len(hist) != 1 || hist[0].Resolution != store.ResolutionAbandoned || hist[0].ResolvedBy != store.ResolvedByExecutor {
		t.Fatalf("unsettled effects %+v, %v; want the append abandoned by the executor", hist, err)
	}
	evs, err := s.st.Events(ctx, alice, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Type == EventEffectResolved && strings.Contains(string(e.Payload), `"outcome":"abandoned"`) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d effect.resolved events of the abandon, want 1", n)
	}
}
