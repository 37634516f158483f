package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// A store that cannot be trusted stops the host from running anything, with
// an error that names the file; the file is left as it was.
func TestOpenRefusesBadStore(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		want    string
	}{
		{"corrupted file", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, datadir.StoreFile), bytes.Repeat([]byte("garbage!"), 1024), 0o600)
		}, datadir.StoreFile},
		{"read-only file", func(t *testing.T, dir string) {
			h := openHost(t, dir, nil)
			h.Close(context.Background())
			os.Chmod(filepath.Join(dir, datadir.StoreFile), 0o444)
		}, "read-only"},
		{"data dir is a file", func(t *testing.T, dir string) {
			os.RemoveAll(dir)
			os.WriteFile(dir, []byte("x"), 0o600)
		}, ""},
		{"unwritable data dir", func(t *testing.T, dir string) {
			os.Chmod(dir, 0o555)
			t.Cleanup(func() { os.Chmod(dir, 0o700) })
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := testwait.ShortTempDir(t)
			tc.prepare(t, dir)
			before, _ := os.ReadFile(filepath.Join(dir, datadir.StoreFile))
			h, err := Open(context.Background(), Options{DataDir: dir, Config: testConfig(t), ExecutorDir: executorDir(t)})
			if err == nil {
				h.Close(context.Background())
				t.Fatal("Open succeeded on a bad data dir")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			after, _ := os.ReadFile(filepath.Join(dir, datadir.StoreFile))
			if !bytes.Equal(before, after) {
				t.Errorf("the store file changed on a refused open")
			}
			t.Logf("%v", err)
		})
	}
}

func TestSecondHostOnDataDirRefused(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	openHost(t, dir, nil)
	_, err := Open(context.Background(), Options{DataDir: dir, Config: testConfig(t), ExecutorDir: executorDir(t)})
	if !errors.Is(err, datadir.ErrDataDirLocked) {
		t.Fatalf("second open: err = %v, want ErrDataDirLocked", err)
	}
}

// Graceful stop: a running task becomes interrupted (host_shutdown) and a
// new host resumes it to completion.
func TestShutdownInterruptsThenResumeOnNewHost(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	pidDir := testwait.PluginDir(t)
	h, err := Open(context.Background(), Options{DataDir: dir, Config: testConfig(t), ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	task := create(t, h, alice, map[string]any{"steps": 2, "sleep_ms": 60000, "pid_file": filepath.Join(pidDir, "pid")}, Limits{})
	pid := readPid(t, filepath.Join(pidDir, "pid"))
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("plugin %d outlived the host's graceful stop", pid)
	}
	h2 := openHost(t, dir, nil)
	got, err := h2.Runner.Get(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, store.StatusInterrupted, store.ReasonHostShutdown)
	atts, _ := h2.Runner.Attempts(context.Background(), alice, task.ID)
	for _, a := range atts {
		if a.Status == store.AttemptCompleted {
			t.Errorf("attempt %d completed during a shutdown", a.Number)
		}
	}
	if _, err := h2.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	// The resumed run still sleeps 60 s a step: cancel proves it runs.
	testwait.Until(t, 10*time.Second, "resumed run", func() bool {
		a, _ := h2.Runner.Attempts(context.Background(), alice, task.ID)
		return len(a) == 2
	})
	if c, err := h2.Runner.Cancel(context.Background(), alice, task.ID); err != nil || c.RunID != 2 {
		t.Fatalf("cancel resumed: run %d, %v", c.RunID, err)
	}
}
