package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// One task's workspace made untrusted — `chmod 0777 .` by an approved
// command, a symlink planted in its place — makes that task unavailable
// and nothing else: the daemon starts (it refused to, for every
// principal), the task's resume is refused naming the path and the fix,
// other tasks run, and once fixed the task resumes to completion.
func TestUntrustedWorkspaceMakesOnlyItsTaskUnavailable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, want string
		spoil      func(t *testing.T, ws string)
	}{
		{"writable by others", "chmod go-w", func(t *testing.T, ws string) {
			mustDo(t, os.MkdirAll(ws, 0o700), os.Chmod(ws, 0o777))
		}},
		{"a symlink", "is a symlink", func(t *testing.T, ws string) {
			mustDo(t, os.MkdirAll(filepath.Dir(ws), 0o700), os.RemoveAll(ws), os.Symlink(t.TempDir(), ws))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := testwait.ShortTempDir(t)
			task := interruptedWithCheckpoint(t, dir)
			ws := filepath.Join(dir, datadir.WorkspaceDirName, task.ID)
			c.spoil(t, ws)

			h := openHost(t, dir, nil)
			_, err := h.Runner.Resume(context.Background(), alice, task.ID)
			if !errors.Is(err, tools.ErrUntrustedWorkspace) || !strings.Contains(err.Error(), ws) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("resume: %v, want refused naming %s and %q", err, ws, c.want)
			}
			if got, _ := h.Runner.Get(context.Background(), alice, task.ID); got.Status != store.StatusInterrupted {
				t.Fatalf("refused resume left the task %s", got.Status)
			}
			other := create(t, h, alice, map[string]any{"steps": 1}, Limits{})
			wantStatus(t, waitEnd(t, h, alice, other.ID), store.StatusCompleted, store.ReasonNone)

			mustDo(t, os.RemoveAll(ws))
			if _, err := h.Runner.Resume(context.Background(), alice, task.ID); err != nil {
				t.Fatalf("resume once fixed: %v", err)
			}
			wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, store.ReasonNone)
		})
	}
}
