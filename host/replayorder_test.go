package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// A re-run of a step whose calls reach the host in another order than the
// dead attempt's (an executor's parallel calls): a call that misses the
// effect at its place replays an earlier run with its fingerprint, the
// oldest first, each at most once; a call made more often than it was
// observed reaches the model; and a tool effect left unsettled is still
// refused, never replayed or run silently.
func TestSeamReplayOutOfPlace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	asked := map[string]int{}
	s := newSeam(t, seamOptions{dir: dir, svc: ServiceConfig{Model: fakeModel{CompleteF: func(_ context.Context, req model.Request) (model.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		p := req.Messages[0].Content
		asked[p]++
		return model.Response{Message: model.Message{Role: "assistant", Content: fmt.Sprintf("%s#%d", p, asked[p])}}, nil
	}}}})
	reg, err := tools.NewRegistry(config.Default().Tools, s.r.workspaceRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	s.r.svc.Tools = reg

	type answer struct {
		content  string
		replayed bool
	}
	ask := func(ctx context.Context, tok, prompt string) (answer, error) {
		resp, err := s.l.lastServices().CallModel(ctx, &pb.CallModelRequest{TurnToken: tok, Messages: []*pb.ChatMessage{{Role: "user", Content: prompt}}})
		if err != nil {
			return answer{}, err
		}
		return answer{resp.GetMessage().GetContent(), resp.GetReplayed()}, nil
	}
	appendLine := func(ctx context.Context, tok string) error {
		_, err := s.l.lastServices().CallTool(ctx, &pb.CallToolRequest{TurnToken: tok, Name: tools.ToolWorkspaceWrite,
			ArgumentsJson: `{"path":"log.txt","content":"line\n","append":true}`})
		return err
	}
	// The re-run's order: b, b, b, a, c where the dead attempt made a, b, b
	// and the append.
	rerun := []string{"b", "b", "b", "a", "c"}
	var got []answer
	var toolCode codes.Code
	s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
		exe := newFakeExecutor()
		exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			if req.Attempt == 1 {
				for _, p := range []string{"a", "b", "b"} {
					if _, err := ask(ctx, req.TurnToken, p); err != nil {
						return plugin.StepResult{}, err
					}
				}
				if err := appendLine(ctx, req.TurnToken); err != nil {
					return plugin.StepResult{}, err
				}
				exe.exit(plugin.ExitStatus{Code: -1, Signal: "killed"})
				return plugin.StepResult{}, fmt.Errorf("%w: EOF", plugin.ErrConnectionLost)
			}
			for _, p := range rerun {
				a, err := ask(ctx, req.TurnToken, p)
				if err != nil {
					return plugin.StepResult{}, err
				}
				got = append(got, a)
			}
			toolCode = status.Code(appendLine(ctx, req.TurnToken))
			return done, nil
		}
		return exe, nil
	}
	ctx := context.Background()
	task := s.run(t, Limits{})
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	// The append's observation was lost in the crash: the line may be
	// written, the ledger cannot know.
	db := rawStore(t, dir)
	if _, err := db.Exec(`UPDATE effects SET status = 'indeterminate', result = NULL, resolution = 'unsettled' WHERE task_id = ? AND kind = 'tool'`, task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.r.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	task = s.wait(t, task.ID)
	wantStatus(t, task, store.StatusCompleted, store.ReasonNone)

	want := []answer{
		{"b#1", true},  // no b at its place: the oldest b
		{"b#2", true},  // its place's b was replayed already: the next one
		{"b#3", false}, // both bs replayed: asked
		{"a#1", true},  // a, out of place
		{"c#1", false}, // never asked before
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("re-run answers %v, want %v", got, want)
	}
	if toolCode != codes.FailedPrecondition {
		t.Fatalf("the unsettled append's retry was answered %v, want %v", toolCode, codes.FailedPrecondition)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"a": 1, "b": 3, "c": 1}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Fatalf("the model was asked %v, want %v", asked, want)
	}
	// Each replay charged nothing: 3 model calls the first time, 2 more.
	if task.Budgets.ModelCalls.Used != 5 || task.Budgets.ToolCalls.Used != 1 {
		t.Fatalf("charged %d model and %d tool calls, want 5 and 1", task.Budgets.ModelCalls.Used, task.Budgets.ToolCalls.Used)
	}
	effs, err := s.st.ListEffects(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	var replays []int64
	for _, e := range effs {
		if e.Attempt == 2 && e.Replayed {
			replays = append(replays, e.Seq)
		}
	}
	if fmt.Sprint(replays) != "[1 2 4]" {
		t.Fatalf("attempt 2's replays %v", replays)
	}
}

// Concurrent calls of a re-run with one fingerprint share its earlier
// runs: of four calls where the dead attempt saw three answered, three
// are replayed (each run once) and one reaches the model.
func TestSeamReplayConcurrentSameFingerprint(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	asked := 0
	s := newSeam(t, seamOptions{svc: ServiceConfig{Model: fakeModel{CompleteF: func(context.Context, model.Request) (model.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return model.Response{Message: model.Message{Role: "assistant", Content: fmt.Sprint("b#", asked)}}, nil
	}}}})
	var replies []string
	var replayed int
	var rmu sync.Mutex
	s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
		exe := newFakeExecutor()
		exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			n := 3
			if req.Attempt > 1 {
				n = 4
			}
			errs := make(chan error, n)
			for range n {
				go func() {
					resp, err := s.l.lastServices().CallModel(ctx, &pb.CallModelRequest{TurnToken: req.TurnToken, Messages: []*pb.ChatMessage{{Role: "user", Content: "b"}}})
					if err == nil && req.Attempt > 1 {
						rmu.Lock()
						replies = append(replies, resp.GetMessage().GetContent())
						if resp.GetReplayed() {
							replayed++
						}
						rmu.Unlock()
					}
					errs <- err
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					return plugin.StepResult{}, err
				}
			}
			if req.Attempt == 1 {
				exe.exit(plugin.ExitStatus{Code: -1, Signal: "killed"})
				return plugin.StepResult{}, fmt.Errorf("%w: EOF", plugin.ErrConnectionLost)
			}
			return done, nil
		}
		return exe, nil
	}
	task := s.run(t, Limits{})
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	if _, err := s.r.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	task = s.wait(t, task.ID)
	wantStatus(t, task, store.StatusCompleted, store.ReasonNone)
	slices.Sort(replies)
	if fmt.Sprint(replies) != "[b#1 b#2 b#3 b#4]" || replayed != 3 || asked != 4 {
		t.Fatalf("re-run answers %v (%d replayed), the model asked %d times; want each of b#1..b#3 replayed once and one call asked", replies, replayed, asked)
	}
}
