package host

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// interruptedWithCheckpoint leaves in dir a task interrupted (host_shutdown)
// in its second attempt, with the checkpoint of its first: a resume must
// open that checkpoint to complete it.
func interruptedWithCheckpoint(t *testing.T, dir string) store.Task {
	t.Helper()
	h, err := Open(context.Background(), Options{DataDir: dir, Config: testConfig(t), ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	task := create(t, h, alice, map[string]any{"steps": 3, "sleep_at_attempt": 2, "long_sleep_ms": 60000}, Limits{})
	testwait.Until(t, 20*time.Second, "second attempt running", func() bool {
		a, _ := h.Runner.Attempts(context.Background(), alice, task.ID)
		return len(a) == 2
	})
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return task
}

func modeOf(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// The restore: run a task to a checkpoint, interrupt it, back the
// data dir up, restore it into a new directory, resume there: it
// completes, so its checkpoint verified with the restored key.
func TestBackupRestoreResume(t *testing.T) {
	t.Parallel()
	src := testwait.ShortTempDir(t)
	task := interruptedWithCheckpoint(t, src)

	backup := filepath.Join(testwait.ShortTempDir(t), "backup")
	info, err := datadir.Backup(context.Background(), src, backup)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if info.StoreBytes == 0 {
		t.Fatal("an empty store copy")
	}
	for path, want := range map[string]fs.FileMode{
		backup: fs.ModeDir | 0o700, filepath.Join(backup, datadir.StoreFile): 0o600, filepath.Join(backup, datadir.KeyFile): 0o600,
	} {
		if got := modeOf(t, path); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	if _, err := datadir.Backup(context.Background(), src, backup); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a second backup over the first: %v, want refused", err)
	}

	restored := filepath.Join(testwait.ShortTempDir(t), "restored")
	ri, err := Restore(context.Background(), backup, restored, datadir.RestoreOptions{UID: -1, GID: -1})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if ri.Checkpoints != 1 {
		t.Fatalf("restore verified %d checkpoints, want 1", ri.Checkpoints)
	}
	if got := modeOf(t, restored); got != fs.ModeDir|0o700 {
		t.Errorf("restored data dir mode %v, want drwx------", got)
	}
	h := openHost(t, restored, nil)
	got, err := h.Runner.Get(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, store.StatusInterrupted, store.ReasonHostShutdown)
	if _, err := h.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	done := waitEnd(t, h, alice, task.ID)
	wantStatus(t, done, store.StatusCompleted, "")
	// Attempt 1 checkpointed done=1, attempt 2 was interrupted, so two
	// more finish the three steps: four attempts. Without the checkpoint
	// it would take five.
	if done.RunID != 2 || done.Budgets.Steps.Used != 4 {
		t.Fatalf("resumed on the restore: run %d, %d attempts; want run 2 and 4 (the checkpoint's step, the interrupted one, two more)", done.RunID, done.Budgets.Steps.Used)
	}
}

func TestRestoreRefusals(t *testing.T) {
	t.Parallel()
	src := testwait.ShortTempDir(t)
	interruptedWithCheckpoint(t, src)
	backup := filepath.Join(testwait.ShortTempDir(t), "backup")
	if _, err := datadir.Backup(context.Background(), src, backup); err != nil {
		t.Fatal(err)
	}
	// A backup whose key is not the store's: every checkpoint fails.
	wrongKey := filepath.Join(testwait.ShortTempDir(t), "wrong")
	if err := os.Mkdir(wrongKey, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(backup, datadir.StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wrongKey, datadir.StoreFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wrongKey, datadir.KeyFile), make([]byte, datadir.KeyBytes), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		target func(t *testing.T) string
		src    string
		want   string
	}{
		{"a non-empty data dir", func(t *testing.T) string {
			d := testwait.ShortTempDir(t)
			if err := os.WriteFile(filepath.Join(d, "taskhost.db"), []byte("live"), 0o600); err != nil {
				t.Fatal(err)
			}
			return d
		}, backup, "is not empty"},
		{"a symlinked data dir", func(t *testing.T) string {
			l := filepath.Join(testwait.ShortTempDir(t), "link")
			if err := os.Symlink(testwait.ShortTempDir(t), l); err != nil {
				t.Fatal(err)
			}
			return l
		}, backup, "is a symlink"},
		{"a world-writable data dir", func(t *testing.T) string {
			d := filepath.Join(testwait.ShortTempDir(t), "d")
			if err := os.Mkdir(d, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
			return d
		}, backup, "writable by group or others"},
		{"another user's data dir", func(t *testing.T) string {
			d := filepath.Join(testwait.ShortTempDir(t), "d")
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Skipf("cannot chown (not root?): %v", err)
			}
			return d
		}, backup, "is owned by uid 65534"},
		{"a key that is not the store's", func(t *testing.T) string { return filepath.Join(testwait.ShortTempDir(t), "new") }, wrongKey, "does not verify with the backup's key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target(t)
			before := listing(t, target)
			_, err := Restore(context.Background(), tc.src, target, datadir.RestoreOptions{UID: -1, GID: -1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore: %v, want an error saying %q", err, tc.want)
			}
			if after := listing(t, target); after != before {
				t.Fatalf("a refused restore changed the target: %q, was %q", after, before)
			}
		})
	}
}

// listing describes what is at path: nothing, or its entries.
func listing(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "(none)"
	}
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() {
		return fi.Mode().String()
	}
	des, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return fi.Mode().String() + " " + strings.Join(names, ",")
}

// Restoring for another user (root restoring for the daemon's user): the
// data dir and both files are that user's, so that user's daemon trusts
// them.
func TestRestoreForAnotherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	src := testwait.ShortTempDir(t)
	interruptedWithCheckpoint(t, src)
	backup := filepath.Join(testwait.ShortTempDir(t), "backup")
	if _, err := datadir.Backup(context.Background(), src, backup); err != nil {
		t.Fatal(err)
	}
	base := testwait.ShortTempDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(base, "restored")
	if _, err := Restore(context.Background(), backup, restored, datadir.RestoreOptions{UID: 65534, GID: 65534}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{restored, filepath.Join(restored, datadir.StoreFile), filepath.Join(restored, datadir.KeyFile)} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s owned by %d:%d, want 65534:65534", p, st.Uid, st.Gid)
		}
	}
	des, _ := os.ReadDir(restored)
	for _, d := range des {
		if fi, _ := os.Lstat(filepath.Join(restored, d.Name())); fi.Sys().(*syscall.Stat_t).Uid != 65534 {
			t.Errorf("restore left %s owned by uid %d", d.Name(), fi.Sys().(*syscall.Stat_t).Uid)
		}
	}
}

// An admin resumes another principal's interrupted task on a real store:
// the act and the admin are in the task's events before its resume, and
// the task completes as its owner's.
func TestAdminResumesAnotherPrincipalsTask(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	task := interruptedWithCheckpoint(t, dir)
	h := openHost(t, dir, nil)
	ctx := context.Background()

	if _, err := h.Runner.AdminAct(ctx, "carol", "t_missing", AdminResume); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("admin act on a missing task: %v, want not found", err)
	}
	owner, err := h.Runner.AdminAct(ctx, "carol", task.ID, AdminResume)
	if err != nil || owner != alice {
		t.Fatalf("AdminAct: owner %q, %v; want %q", owner, err, alice)
	}
	if _, err := h.Runner.Resume(ctx, owner, task.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	evs, err := h.Store.Events(ctx, alice, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	admin, resumed := -1, -1
	for i, ev := range evs {
		switch ev.Type {
		case EventAdminAct:
			admin = i
			if p := string(ev.Payload); !strings.Contains(p, `"by":"carol"`) || !strings.Contains(p, "resume requested by admin carol") {
				t.Fatalf("admin event payload %s does not name the act and the admin", p)
			}
		case EventTaskResumed:
			resumed = i
		}
	}
	if admin < 0 || resumed < admin {
		t.Fatalf("admin event at %d, task.resumed at %d: want the admin's record first", admin, resumed)
	}
	// The owner acting on her own task records nothing extra.
	before := len(evs)
	if owner, err := h.Runner.AdminAct(ctx, alice, task.ID, AdminCancel); err != nil || owner != alice {
		t.Fatalf("owner's own act: %q, %v", owner, err)
	}
	if evs, _ := h.Store.Events(ctx, alice, task.ID, 0, 1000); len(evs) != before {
		t.Fatalf("an owner's own act recorded %d events", len(evs)-before)
	}
}
