package host

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// createWithFile creates a testexec task whose workspace holds a file.
func createWithFile(t *testing.T, h *Host, te map[string]any) store.Task {
	t.Helper()
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "g", te),
		Files: []File{{Name: "notes.md", Data: []byte("notes")}}})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func wantWorkspace(t *testing.T, h *Host, id string, exists bool) {
	t.Helper()
	_, err := os.Lstat(filepath.Join(h.DataDir, datadir.WorkspaceDirName, id, "notes.md"))
	if exists && err != nil {
		t.Fatalf("workspace of %s: %v, want it kept", id, err)
	}
	if !exists && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("workspace of %s: %v, want it removed", id, err)
	}
}

func TestDeleteTask(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	ctx := context.Background()
	done := createWithFile(t, h, nil)
	wantStatus(t, waitEnd(t, h, alice, done.ID), store.StatusCompleted, "")
	running := createWithFile(t, h, map[string]any{"sleep_ms": 60000})
	testwait.Until(t, 10*time.Second, "task running", func() bool {
		got, err := h.Runner.Get(ctx, alice, running.ID)
		return err == nil && got.Status == store.StatusRunning
	})

	// Another principal sees neither.
	for _, id := range []string{done.ID, running.ID} {
		if err := h.Runner.Delete(ctx, "bob", id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("bob deletes %s: %v, want not found", id, err)
		}
	}
	// A running task is refused, naming its status; nothing is removed.
	err := h.Runner.Delete(ctx, alice, running.ID)
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "is running") {
		t.Fatalf("delete of a running task: %v, want a conflict naming the status", err)
	}
	if got, err := h.Runner.Get(ctx, alice, running.ID); err != nil || got.Status != store.StatusRunning {
		t.Fatalf("after a refused delete: %v, %v", got.Status, err)
	}
	wantWorkspace(t, h, running.ID, true)

	if err := h.Runner.Delete(ctx, alice, done.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := h.Runner.Get(ctx, alice, done.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted task still readable: %v", err)
	}
	if evs, err := h.Store.Events(ctx, alice, done.ID, 0, 100); !errors.Is(err, store.ErrNotFound) || len(evs) != 0 {
		t.Fatalf("deleted task's events: %d, %v", len(evs), err)
	}
	wantWorkspace(t, h, done.ID, false)
}

func TestSweepDeletesOnlyOldFinishedTasks(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	ctx := context.Background()
	done := createWithFile(t, h, nil)
	wantStatus(t, waitEnd(t, h, alice, done.ID), store.StatusCompleted, "")
	running := createWithFile(t, h, map[string]any{"sleep_ms": 60000})

	// Nothing finished an hour ago.
	if n, err := h.Runner.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("sweep of tasks older than an hour: %d, %v; want 0", n, err)
	}
	wantWorkspace(t, h, done.ID, true)
	// Everything finished before now: the completed task only.
	if n, err := h.Runner.Sweep(ctx, 0); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1", n, err)
	}
	if _, err := h.Runner.Get(ctx, alice, done.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("swept task still readable: %v", err)
	}
	wantWorkspace(t, h, done.ID, false)
	if _, err := h.Runner.Get(ctx, alice, running.ID); err != nil {
		t.Fatalf("the running task was swept: %v", err)
	}
	wantWorkspace(t, h, running.ID, true)
}
