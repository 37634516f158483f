package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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

// toolCall is one CallTool a hostile executor makes.
type toolCall struct {
	tool, key  string
	idempotent bool
}

// The other way to retry an unsettled tool effect without an approval: an
// executor marks the call idempotent under a key its tool honours
// (workspace.write, an append included). Attempt 1 appends a line and dies
// with the append's observation lost (the effect indeterminate, the line
// written); attempt 2, a hostile executor, re-issues the call in every way
// it could try. Only the same call, marked idempotent under the same key
// both times, is re-admitted — charged again, and written once; every other
// try is refused before the tool runs, and the real writes never exceed the
// charged tool calls. The resume starts from the workspace as of the last
// committed step (host/workspace.go), so the dead attempt's line is not
// there: the re-admitted call writes it anew, not deduplicated, and a
// refused one leaves no line at all.
func TestSeamIdempotentRetry(t *testing.T) {
	t.Parallel()
	appendLine := `{"path":"log.txt","content":"line\n","append":true}`
	cases := []struct {
		name          string
		first, second toolCall
		code          codes.Code
		charged       int64
	}{
		{"same key, idempotent both times", toolCall{"workspace.write", "k1", true}, toolCall{"workspace.write", "k1", true}, codes.OK, 2},
		{"re-issued without idempotent", toolCall{"workspace.write", "k1", true}, toolCall{"workspace.write", "k1", false}, codes.FailedPrecondition, 1},
		{"idempotent under another key", toolCall{"workspace.write", "k1", true}, toolCall{"workspace.write", "k2", true}, codes.FailedPrecondition, 1},
		{"marked idempotent only on the retry", toolCall{"workspace.write", "k1", false}, toolCall{"workspace.write", "k1", true}, codes.FailedPrecondition, 1},
		{"idempotent without a key", toolCall{"workspace.write", "k1", true}, toolCall{"workspace.write", "", true}, codes.InvalidArgument, 1},
		{"idempotent on shell.run", toolCall{"workspace.write", "k1", true}, toolCall{"shell.run", "k1", true}, codes.InvalidArgument, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newSeam(t, seamOptions{dir: dir})
			reg, err := tools.NewRegistry(config.Default().Tools, s.r.workspaceRoot)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			s.r.svc.Tools = reg
			var code codes.Code
			var output string
			call := func(ctx context.Context, tok string, c toolCall) error {
				args := appendLine
				if c.tool == tools.ToolShellRun {
					args = `{"command":"echo line >> log.txt"}`
				}
				resp, err := s.l.lastServices().CallTool(ctx, &pb.CallToolRequest{TurnToken: tok, Name: c.tool, ArgumentsJson: args,
					IdempotencyKey: c.key, Idempotent: c.idempotent})
				output = resp.GetResultJson()
				return err
			}
			s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
				exe := newFakeExecutor()
				exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
					if req.Attempt == 1 {
						if err := call(ctx, req.TurnToken, tc.first); err != nil {
							return plugin.StepResult{}, err
						}
						exe.exit(plugin.ExitStatus{Code: -1, Signal: "killed"})
						return plugin.StepResult{}, fmt.Errorf("%w: EOF", plugin.ErrConnectionLost)
					}
					code = status.Code(call(ctx, req.TurnToken, tc.second))
					return done, nil
				}
				return exe, nil
			}
			ctx := context.Background()
			task := s.run(t, Limits{})
			wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
			// The crash came after the append and before its observation
			// was written: the line is there, the ledger cannot know it.
			db := rawStore(t, dir)
			if _, err := db.Exec(`UPDATE effects SET status = 'indeterminate', result = NULL, resolution = 'unsettled' WHERE task_id = ?`, task.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := s.r.Resume(ctx, alice, task.ID); err != nil {
				t.Fatal(err)
			}
			task = s.wait(t, task.ID)
			wantStatus(t, task, store.StatusCompleted, store.ReasonNone)
			if code != tc.code {
				t.Fatalf("the retry was answered %v, want %v", code, tc.code)
			}
			b, err := os.ReadFile(filepath.Join(s.r.workspace(task.ID), "log.txt"))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			lines, want := int64(strings.Count(string(b), "\n")), int64(0)
			if tc.code == codes.OK {
				want = 1
			}
			if lines != want || task.Budgets.ToolCalls.Used != tc.charged || lines > task.Budgets.ToolCalls.Used {
				t.Fatalf("%d line(s) written, %d tool call(s) charged; want %d and %d", lines, task.Budgets.ToolCalls.Used, want, tc.charged)
			}
			if tc.code == codes.OK {
				var out struct{ Deduplicated bool }
				if json.Unmarshal([]byte(output), &out) != nil || out.Deduplicated {
					t.Fatalf("the re-admitted call answered %s; want it written anew: the dead attempt's line was rolled back", output)
				}
			}
			effs, err := s.st.ListEffects(ctx, alice, task.ID)
			if err != nil || len(effs) == 0 || effs[0].IdempotencyKey != tc.first.key {
				t.Fatalf("ledger %+v, %v", effs, err)
			}
			if tc.first.idempotent != strings.HasSuffix(effs[0].Summary, idempotentMark) {
				t.Fatalf("ledger summary %q", effs[0].Summary)
			}
		})
	}
}
