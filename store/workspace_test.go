package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func wsFile(path, content string) WorkspaceFile {
	sum := sha256.Sum256([]byte(content))
	return WorkspaceFile{Path: path, Mode: 0o100644, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), Content: []byte(content)}
}

// wsEngines runs fn on a SQLite store and on a PostgreSQL one, each with
// the workspace limits given.
func wsEngines(t *testing.T, bytes, files int, fn func(t *testing.T, s *Store)) {
	t.Helper()
	lim := func(o *Options) { o.Limits.WorkspaceBytes, o.Limits.WorkspaceFiles = bytes, files }
	t.Run("sqlite", func(t *testing.T) { fn(t, openTest(t, lim)) })
	t.Run("postgres", func(t *testing.T) { fn(t, openPostgres(t, lim)) })
}

// manifest is the stored workspace as path → content.
func manifest(t *testing.T, s *Store, id string) (Workspace, map[string]string) {
	t.Helper()
	ctx := context.Background()
	w, err := s.TaskWorkspace(ctx, "p", id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range w.Files {
		b, err := s.WorkspaceContent(ctx, "p", id, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		got[f.Path] = string(b)
	}
	return w, got
}

// TestWorkspaceStoredWithStep: each step stores what it changed with its
// outcome, on both the fast and the general path; the totals follow the
// changes; a task's rows go with it.
func TestWorkspaceStoredWithStep(t *testing.T) {
	t.Parallel()
	wsEngines(t, 1000, 10, func(t *testing.T, s *Store) {
		ctx := context.Background()
		task, a := claimedTask(t, s, "p", "t")
		if w, _ := manifest(t, s, "t"); w.Stored || w.Attempt != 0 || len(w.Files) != 0 {
			t.Fatalf("before any step: %+v", w)
		}
		seeded := NewTask{ID: "t2", PrincipalID: "p", Executor: "legacy", Spec: []byte(`{"goal":"test"}`), Limits: defaultBudgets(),
			Workspace: &WorkspaceChange{Put: []WorkspaceFile{wsFile("seed", "s")}}}
		if _, err := s.CreateTask(ctx, seeded); err != nil {
			t.Fatal(err)
		}
		if w, got := manifest(t, s, "t2"); !w.Stored || w.Attempt != 0 || !reflect.DeepEqual(got, map[string]string{"seed": "s"}) {
			t.Fatalf("a task created with files: %+v %v", w, got)
		}
		// Task t gets a seed as CreateTask would have stored it.
		if err := s.write(ctx, func(tx *txn) error {
			return s.putWorkspace(ctx, tx, "t", 0, &WorkspaceChange{Put: []WorkspaceFile{wsFile("seed", "s")}})
		}); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			change WorkspaceChange
			want   map[string]string
		}{
			{WorkspaceChange{Put: []WorkspaceFile{wsFile("a.txt", "one"), wsFile("d/b.txt", "two")}}, map[string]string{"seed": "s", "a.txt": "one", "d/b.txt": "two"}},
			{WorkspaceChange{Put: []WorkspaceFile{wsFile("a.txt", "three!"), wsFile("empty", "")}, Delete: []string{"d/b.txt", "never/was", "seed"}},
				map[string]string{"a.txt": "three!", "empty": ""}},
			{WorkspaceChange{}, map[string]string{"a.txt": "three!", "empty": ""}},
		}
		for i, st := range steps {
			f := stepFinish(task.RunID, a.Number)
			f.Workspace = &st.change
			_, next, _, err := s.FinishAndClaim(ctx, f, NewEvent{Type: "step.started"})
			if err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
			w, got := manifest(t, s, "t")
			if !reflect.DeepEqual(got, st.want) || w.Attempt != a.Number || !w.Stored {
				t.Fatalf("after step %d: attempt %d files %v, want attempt %d files %v", i+1, w.Attempt, got, a.Number, st.want)
			}
			var sum int64
			for _, c := range st.want {
				sum += int64(len(c))
			}
			if w.Bytes != sum {
				t.Fatalf("after step %d: %d bytes counted, want %d", i+1, w.Bytes, sum)
			}
			a = *next
		}
		f := stepFinish(task.RunID, a.Number)
		f.Status, f.Outcome, f.TaskTo, f.Result = AttemptCompleted, "complete", StatusCompleted, []byte("done")
		f.Workspace = &WorkspaceChange{Put: []WorkspaceFile{wsFile("final", "end")}}
		if _, err := s.FinishAttempt(ctx, f); err != nil {
			t.Fatal(err)
		}
		if _, got := manifest(t, s, "t"); got["final"] != "end" {
			t.Fatalf("the completing step's file is not stored: %v", got)
		}
		if err := s.DeleteTask(ctx, "p", "t"); err != nil {
			t.Fatalf("DeleteTask with a stored workspace: %v", err)
		}
		if _, err := s.TaskWorkspace(ctx, "p", "t"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("TaskWorkspace of a deleted task: %v, want ErrNotFound", err)
		}
	})
}

// TestWorkspaceLimits: a workspace at its limits is stored; one byte or
// one file past either is refused with an error naming the limit, and
// nothing of the step is written.
func TestWorkspaceLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		put   []WorkspaceFile
		limit string // "" stored
	}{
		{"at the byte limit", []WorkspaceFile{wsFile("a", strings.Repeat("x", 60)), wsFile("b", strings.Repeat("y", 40))}, ""},
		{"a byte past it", []WorkspaceFile{wsFile("a", strings.Repeat("x", 60)), wsFile("b", strings.Repeat("y", 41))}, "workspace_bytes"},
		{"at the file limit", []WorkspaceFile{wsFile("a", ""), wsFile("b", ""), wsFile("c", "")}, ""},
		{"a file past it", []WorkspaceFile{wsFile("a", ""), wsFile("b", ""), wsFile("c", ""), wsFile("d", "")}, "workspace_files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wsEngines(t, 100, 3, func(t *testing.T, s *Store) {
				ctx := context.Background()
				task, a := claimedTask(t, s, "p", "t")
				// A first step stores one file the counted step replaces,
				// so the totals are kept across rows.
				f := stepFinish(task.RunID, a.Number)
				f.Workspace = &WorkspaceChange{Put: []WorkspaceFile{wsFile("a", "old")}}
				_, next, _, err := s.FinishAndClaim(ctx, f, NewEvent{Type: "step.started"})
				if err != nil {
					t.Fatal(err)
				}
				before := getTask(t, s, "p", "t")
				f = stepFinish(task.RunID, next.Number)
				f.Workspace = &WorkspaceChange{Put: tc.put}
				_, _, _, err = s.FinishAndClaim(ctx, f, NewEvent{Type: "step.started"})
				w, got := manifest(t, s, "t")
				if tc.limit == "" {
					if err != nil || len(got) != len(tc.put) {
						t.Fatalf("at the limit: err %v, stored %v", err, got)
					}
					return
				}
				var le *WorkspaceLimitError
				if !errors.As(err, &le) || le.Limit != tc.limit || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.limit) {
					t.Fatalf("past the limit: %v, want a WorkspaceLimitError naming %s", err, tc.limit)
				}
				if w.Attempt != a.Number || !reflect.DeepEqual(got, map[string]string{"a": "old"}) {
					t.Fatalf("a refused step wrote its workspace: attempt %d, %v", w.Attempt, got)
				}
				if after := getTask(t, s, "p", "t"); after.Budgets.Steps.Used != before.Budgets.Steps.Used || after.CheckpointAttempt != before.CheckpointAttempt {
					t.Fatalf("a refused step was recorded: %+v, before %+v", after, before)
				}
			})
		})
	}
}

// TestWorkspaceChangeRefused: paths the store would not give back as
// given, or that leave the workspace, and a content that is not its size.
func TestWorkspaceChangeRefused(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	bad := wsFile("a", "abc")
	bad.Size = 2
	for _, c := range []WorkspaceChange{
		{Put: []WorkspaceFile{wsFile("../x", "")}},
		{Put: []WorkspaceFile{wsFile("/abs", "")}},
		{Put: []WorkspaceFile{wsFile("a/./b", "")}},
		{Put: []WorkspaceFile{wsFile("bad\xff", "")}},
		{Put: []WorkspaceFile{bad}},
		{Delete: []string{""}},
		{Delete: []string{strings.Repeat("a", MaxWorkspacePathBytes+1)}},
	} {
		if err := s.checkWorkspaceChange("t", &c); !errors.Is(err, ErrInvalid) {
			t.Errorf("change %+v: %v, want ErrInvalid", c, err)
		}
	}
	if err := s.checkWorkspaceChange("t", &WorkspaceChange{Delete: []string{strings.Repeat("a", MaxWorkspacePathBytes)}}); err != nil {
		t.Errorf("a path at the limit: %v", err)
	}
}

// BenchmarkStepWorkspace is BenchmarkFinishAndClaim's step with what it
// changed in the workspace stored with it: nothing (the plain step), one
// new 4 KiB file, or one 4 KiB file of a workspace of 1000 rewritten. The
// cost is the changed file's: the size of the stored workspace does not
// enter it. It reports the write statements per step.
func BenchmarkStepWorkspace(b *testing.B) {
	content := strings.Repeat("x", 4<<10)
	for _, st := range benchStores() {
		for _, tc := range []struct {
			name   string
			stored int // files stored before the timed steps
			change func(i int) *WorkspaceChange
		}{
			{"unchanged", 0, func(int) *WorkspaceChange { return nil }},
			{"new 4KiB file", 0, func(i int) *WorkspaceChange {
				return &WorkspaceChange{Put: []WorkspaceFile{wsFile(fmt.Sprintf("f%d", i), content)}}
			}},
			{"1 of 1000 files rewritten", 1000, func(i int) *WorkspaceChange {
				return &WorkspaceChange{Put: []WorkspaceFile{wsFile(fmt.Sprintf("f%d", i%1000), content+fmt.Sprint(i))}}
			}},
		} {
			b.Run(st.name+"/"+tc.name, func(b *testing.B) {
				ctx := context.Background()
				s := st.open(b)
				task, a := benchClaimed(b, s, int64(b.N)+3)
				step := func(i int, c *WorkspaceChange) {
					_, next, _, err := s.FinishAndClaim(ctx, FinishAttempt{
						PrincipalID: "p", TaskID: "bench", RunID: task.RunID, Number: a.Number,
						Status: AttemptCompleted, Outcome: "continue", Summary: "did a step",
						Checkpoint: make([]byte, 1024), WallMillisUsed: int64(i),
						Events:    []NewEvent{{Type: "step.completed", Payload: []byte(`{"attempt":1}`)}},
						Workspace: c,
					}, NewEvent{Type: "step.started", Payload: []byte(`{"attempt":2}`)})
					if err != nil || next == nil {
						b.Fatalf("step %d: next %v, %v", i, next, err)
					}
					a = *next
				}
				seed := &WorkspaceChange{}
				for i := range tc.stored {
					seed.Put = append(seed.Put, wsFile(fmt.Sprintf("f%d", i), content))
				}
				step(0, seed)
				b.ReportAllocs()
				before := s.statements.Load()
				b.ResetTimer()
				for i := range b.N {
					step(i+1, tc.change(i))
				}
				b.StopTimer()
				b.ReportMetric(float64(s.statements.Load()-before)/float64(b.N), "stmts/step")
			})
		}
	}
}
