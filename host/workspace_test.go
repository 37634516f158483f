package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// storedTree is task id's stored workspace as path → content.
func storedTree(t *testing.T, st *store.Store, id string) map[string]string {
	t.Helper()
	ctx := context.Background()
	w, err := st.TaskWorkspace(ctx, alice, id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range w.Files {
		b, err := st.WorkspaceContent(ctx, alice, id, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		got[f.Path] = string(b)
	}
	return got
}

// writeSteps makes exe's attempts 1..3 change the workspace (a file each,
// step 2 removes the seed, step 3 rewrites step 1's file), and attempt 4
// write a file and rewrite another, then block until its context ends,
// reporting on started.
func writeSteps(r *Runner, exe *fakeExecutor) (started chan plugin.StepRequest) {
	started = make(chan plugin.StepRequest, 1)
	exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
		ws := r.workspace(req.TaskID)
		write := func(name, content string) error {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(ws, name), []byte(content), 0o600)
		}
		var err error
		switch req.Attempt {
		case 1:
			err = write("step-1.txt", "one")
		case 2:
			err = errors.Join(write("d/step-2.txt", "two"), os.Remove(filepath.Join(ws, "notes.md")))
		case 3:
			err = errors.Join(write("step-3.txt", "three"), write("step-1.txt", "one, again"))
		default:
			if err := errors.Join(write("step-4.txt", "crashed"), write("step-1.txt", "crashed")); err != nil {
				return plugin.StepResult{}, err
			}
			started <- req
			<-ctx.Done()
			return plugin.StepResult{}, ctx.Err()
		}
		if err != nil {
			return plugin.StepResult{}, err
		}
		return plugin.StepResult{Outcome: plugin.OutcomeContinue, Summary: fmt.Sprintf("step %d", req.Attempt)}, nil
	}
	return started
}

// committedSteps is the workspace as of step 3 of writeSteps.
var committedSteps = map[string]string{"step-1.txt": "one, again", "d/step-2.txt": "two", "step-3.txt": "three"}

// TestFleetResumeElsewhereHasCommittedFiles: host A runs three steps that
// change the workspace and is lost mid-step 4, after writing in it; host
// B, with a data dir of its own, resumes the task: its first step sees
// the workspace as of step 3 — step 4's writes are not there — and the
// task completes on B with its files in the store.
func TestFleetResumeElsewhereHasCommittedFiles(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		dir := newSharedStore(t, driver)
		a := newFleetHost(t, dir, "host-a", silent)
		started := writeSteps(a.r, a.exe)
		task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fleet"}`),
			Files: []File{{Name: "notes.md", Data: []byte("from A")}}})
		if err != nil {
			t.Fatal(err)
		}
		if req := recv(t, started, "A's step 4"); req.Attempt != 4 {
			t.Fatalf("A blocked in attempt %d, want 4", req.Attempt)
		}
		if got := storedTree(t, a.st, task.ID); !maps.Equal(got, committedSteps) {
			t.Fatalf("stored during step 4: %v, want step 3's %v", got, committedSteps)
		}
		b := newFleetHost(t, dir, "host-b", quick)
		testwait.Until(t, 10*time.Second, "host_lost on B", func() bool {
			return getTaskOf(t, b.st, task.ID).Status == store.StatusInterrupted
		})
		seen := make(chan map[string]string, 1)
		b.exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			seen <- testfs.Tree(t, b.r.workspace(req.TaskID))
			if err := os.WriteFile(filepath.Join(b.r.workspace(req.TaskID), "from-b.txt"), []byte("b"), 0o600); err != nil {
				return plugin.StepResult{}, err
			}
			return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "done"}, nil
		}
		if _, err := b.r.Resume(context.Background(), alice, task.ID); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, seen, "B's step"); !maps.Equal(got, committedSteps) {
			t.Fatalf("B's step saw %v, want the workspace as of step 3: %v", got, committedSteps)
		}
		testwait.Until(t, 10*time.Second, "the task completed on B", func() bool {
			return getTaskOf(t, b.st, task.ID).Status == store.StatusCompleted
		})
		want := maps.Clone(committedSteps)
		want["from-b.txt"] = "b"
		if got := storedTree(t, b.st, task.ID); !maps.Equal(got, want) {
			t.Fatalf("stored after B's step: %v, want %v", got, want)
		}
	})
}

// TestResumeRollsBackCrashedStep: on the host that ran it, a resume
// starts from the last committed step too: what the crashed attempt wrote
// is removed or put back, files and directories it made included.
func TestResumeRollsBackCrashedStep(t *testing.T) {
	t.Parallel()
	s := newSeam(t, seamOptions{})
	ws := ""
	s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
		exe := newFakeExecutor()
		exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			ws = s.r.workspace(req.TaskID)
			switch req.Attempt {
			case 1:
				if err := os.WriteFile(filepath.Join(ws, "kept.txt"), []byte("kept"), 0o600); err != nil {
					return plugin.StepResult{}, err
				}
				return plugin.StepResult{Outcome: plugin.OutcomeContinue, Summary: "one"}, nil
			case 2:
				err := errors.Join(os.WriteFile(filepath.Join(ws, "kept.txt"), []byte("changed"), 0o600),
					os.MkdirAll(filepath.Join(ws, "new/dir"), 0o700),
					os.WriteFile(filepath.Join(ws, "new/dir/f"), []byte("x"), 0o600))
				if err != nil {
					return plugin.StepResult{}, err
				}
				exe.exit(plugin.ExitStatus{Code: -1, Signal: "killed"})
				return plugin.StepResult{}, fmt.Errorf("%w: EOF", plugin.ErrConnectionLost)
			}
			got := testfs.Tree(t, ws)
			if _, err := os.Stat(filepath.Join(ws, "new")); !errors.Is(err, fs.ErrNotExist) || !maps.Equal(got, map[string]string{"kept.txt": "kept"}) {
				return plugin.StepResult{}, fmt.Errorf("the resumed step saw %v (new/: %v), want step 1's workspace", got, err)
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
}

// TestWorkspaceOnlyChangedFilesStored: a step that changes one file of
// many hands the store that file alone (by stat, without reading the
// others), and a step that touches a file without changing it hands none.
func TestWorkspaceOnlyChangedFilesStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "t1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for i := range 100 {
		p := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(p, []byte(strings.Repeat("x", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	ws := &workspaceSync{taskID: "t1", parent: root, files: map[string]wsEntry{}, maxBytes: 1 << 20, maxFiles: 1000}
	change, next, err := ws.changes(ctx)
	if err != nil || len(change.Put) != 100 || len(change.Delete) != 0 {
		t.Fatalf("first step: %d put, %d deleted, %v; want all 100 files", len(change.Put), len(change.Delete), err)
	}
	ws.committed(next)
	// The walk's stat is trusted only for files older than the racy
	// window: ctime cannot be set back, so the walks are dated later.
	later := time.Now().Add(time.Hour)
	ws.now = func() time.Time { return later }
	if change, next, err = ws.changes(ctx); err != nil || change != nil {
		t.Fatalf("a step that changed nothing, walked within the racy window: %+v, %v; want no file stored", change, err)
	}
	ws.committed(next)
	if change, next, err = ws.changes(ctx); err != nil || change != nil {
		t.Fatalf("a step that changed nothing: %+v, %v; want no change", change, err)
	}
	ws.committed(next)
	later = later.Add(time.Hour)
	if err := os.WriteFile(filepath.Join(dir, "f007"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "f008"), time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "f009")); err != nil {
		t.Fatal(err)
	}
	change, _, err = ws.changes(ctx)
	if err != nil || len(change.Put) != 1 || change.Put[0].Path != "f007" || string(change.Put[0].Content) != "changed" ||
		len(change.Delete) != 1 || change.Delete[0] != "f009" {
		t.Fatalf("one file changed, one touched, one removed: %+v, %v", change, err)
	}
}

// TestWorkspaceLimitFailsStep: a step whose workspace is over the store's
// byte limit fails the task with workspace_too_large, naming the limit,
// and stores nothing of it; one at the limit is stored.
func TestWorkspaceLimitFailsStep(t *testing.T) {
	t.Parallel()
	const limit = 1000
	for _, tc := range []struct {
		name   string
		size   int
		want   store.Status
		stored bool
	}{
		{"at the limit", limit, store.StatusCompleted, true},
		{"a byte past it", limit + 1, store.StatusFailed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeam(t, seamOptions{limits: store.Limits{WorkspaceBytes: limit}})
			s.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
				exe := newFakeExecutor()
				exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
					ws := s.r.workspace(req.TaskID)
					if err := os.WriteFile(filepath.Join(ws, "big"), make([]byte, tc.size), 0o600); err != nil {
						return plugin.StepResult{}, err
					}
					return done, nil
				}
				return exe, nil
			}
			task := s.run(t, Limits{})
			if task.Status != tc.want {
				t.Fatalf("task %s (%s: %s), want %s", task.Status, task.Reason, task.Message, tc.want)
			}
			if tc.want == store.StatusFailed && (task.Reason != store.ReasonWorkspaceTooLarge || !strings.Contains(task.Message, "workspace_bytes") ||
				!strings.Contains(task.Message, fmt.Sprint(limit))) {
				t.Fatalf("task failed %s: %q; want workspace_too_large naming workspace_bytes and %d", task.Reason, task.Message, limit)
			}
			if got := storedTree(t, s.st, task.ID); (len(got) == 1) != tc.stored {
				t.Fatalf("stored %d files, want stored=%v", len(got), tc.stored)
			}
		})
	}
}

// BenchmarkWorkspaceChanges measures what a step's end costs the host in
// a workspace of n files of 4 KiB, one of which the step rewrote: the
// stat walk of all n, and the read and hash of the one.
func BenchmarkWorkspaceChanges(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ctx := context.Background()
			root := b.TempDir()
			dir := filepath.Join(root, "t1")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				b.Fatal(err)
			}
			content := []byte(strings.Repeat("x", 4<<10))
			for i := range n {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), content, 0o600); err != nil {
					b.Fatal(err)
				}
			}
			// Dated an hour on, so every stat is past the racy window.
			later := time.Now().Add(time.Hour)
			ws := &workspaceSync{taskID: "t1", parent: root, files: map[string]wsEntry{}, maxBytes: 1 << 30, maxFiles: 1 << 20,
				now: func() time.Time { return later }}
			_, next, err := ws.changes(ctx)
			if err != nil {
				b.Fatal(err)
			}
			ws.committed(next)
			b.ResetTimer()
			for i := range b.N {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i%n)), fmt.Appendf(content[:len(content):len(content)], "%d", i), 0o600); err != nil {
					b.Fatal(err)
				}
				change, next, err := ws.changes(ctx)
				if err != nil || len(change.Put) != 1 {
					b.Fatalf("change %+v, %v; want the one file", change, err)
				}
				ws.committed(next)
			}
		})
	}
}

// TestStoredWorkspaceBoundIsTheToolsBound: the store keeps as much of a
// workspace as the workspace tools let it hold, no less.
func TestStoredWorkspaceBoundIsTheToolsBound(t *testing.T) {
	t.Parallel()
	if store.DefaultWorkspaceBytes != tools.MaxWorkspaceBytes {
		t.Fatalf("the store keeps %d bytes of a workspace, the tools let it hold %d", store.DefaultWorkspaceBytes, tools.MaxWorkspaceBytes)
	}
}

// BenchmarkWorkspaceUnchanged measures what the end of a step that
// changed nothing costs the host in an empty workspace, a no-op step's
// case: the directories' open and a walk that finds nothing.
func BenchmarkWorkspaceUnchanged(b *testing.B) {
	ctx := context.Background()
	ws := &workspaceSync{taskID: "t1", parent: b.TempDir(), files: map[string]wsEntry{}, maxBytes: 1 << 30, maxFiles: 1 << 20}
	_, next, err := ws.changes(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ws.committed(next)
	ws.stored = true
	for b.Loop() {
		change, _, err := ws.changes(ctx)
		if err != nil || change != nil {
			b.Fatalf("change %+v, %v; want none", change, err)
		}
	}
}
