package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

func TestFindTrampoline(t *testing.T) {
	t.Parallel()
	exe, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to stand in for a binary: %v", err)
	}
	write := func(t *testing.T, dir string, mode os.FileMode) {
		t.Helper()
		path := filepath.Join(dir, TrampolineName)
		if err := os.WriteFile(path, exe, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		found   bool
		wantErr string
	}{
		{name: "absent", setup: func(*testing.T, string) {}},
		{name: "trusted", setup: func(t *testing.T, dir string) { write(t, dir, 0o755) }, found: true},
		{name: "owner only", setup: func(t *testing.T, dir string) { write(t, dir, 0o700) }, found: true},
		{name: "link to a trusted file", found: true, setup: func(t *testing.T, dir string) {
			other := t.TempDir()
			write(t, other, 0o755)
			if err := os.Symlink(filepath.Join(other, TrampolineName), filepath.Join(dir, TrampolineName)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "group-writable", setup: func(t *testing.T, dir string) { write(t, dir, 0o775) }, wantErr: "writable by group or others"},
		{name: "world-writable", setup: func(t *testing.T, dir string) { write(t, dir, 0o757) }, wantErr: "writable by group or others"},
		{name: "not executable", setup: func(t *testing.T, dir string) { write(t, dir, 0o644) }, wantErr: "not executable"},
		{name: "a directory", wantErr: "not a regular file", setup: func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, TrampolineName), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another user's", wantErr: "owned by uid 65534", setup: func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the file away")
			}
			write(t, dir, 0o755)
			if err := os.Chown(filepath.Join(dir, TrampolineName), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			tr, err := findTrampoline(dir)
			t.Cleanup(func() { tr.close() })
			got := ""
			if tr != nil {
				got = tr.path
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), filepath.Join(dir, TrampolineName)) {
					t.Fatalf("findTrampoline = %q, %v; want an error naming the file and %q", got, err, tt.wantErr)
				}
				if tr != nil {
					t.Fatalf("a refused trampoline came back as %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, TrampolineName); tt.found && got != want || !tt.found && tr != nil {
				t.Fatalf("findTrampoline = %q, found %v", got, tt.found)
			}
			if tr != nil && (len(tr.sha256) != 64 || int(tr.f.Fd()) < trampolineFD) {
				t.Errorf("trampoline %+v: want it hashed and held at fd %d or above", tr, trampolineFD)
			}
		})
	}
}

// The host starts plugins through the taskhost-confine of its executor
// dir: a trusted one that cannot confine (here /bin/false) makes every
// plugin unavailable, an untrusted one is not used at all, and the real
// one runs tasks, machinespirit's worker included.
func TestPluginsStartThroughTheDedicatedTrampoline(t *testing.T) {
	t.Parallel()
	bin := executorDir(t)
	stub := func(t *testing.T, src string, mode os.FileMode) string {
		t.Helper()
		dir := t.TempDir()
		data, err := os.ReadFile(src)
		if err != nil {
			t.Skipf("no %s to stand in for a trampoline: %v", src, err)
		}
		if err := os.WriteFile(filepath.Join(dir, TrampolineName), data, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, TrampolineName), mode); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	open := func(t *testing.T, executorDir string, mutate func(*config.Config)) *Host {
		t.Helper()
		cfg := testConfig(t)
		if mutate != nil {
			mutate(&cfg)
		}
		h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		return h
	}
	t.Run("real", func(t *testing.T) {
		h := open(t, bin, machineSpiritOn)
		if want := filepath.Join(bin, TrampolineName); h.trampolinePath() != want {
			t.Fatalf("trampoline %q, want %q", h.trampolinePath(), want)
		}
		task := waitEnd(t, h, alice, create(t, h, alice, map[string]any{"steps": 2}, Limits{}).ID)
		wantStatus(t, task, store.StatusCompleted, "")
		ms, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit", Spec: rlmSpec(t), Files: []File{rlmContext(t)}})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, waitEnd(t, h, alice, ms.ID), store.StatusCompleted, "")
	})
	t.Run("one that cannot confine", func(t *testing.T) {
		h := open(t, stub(t, "/bin/false", 0o755), nil)
		_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "g", nil)})
		if !errors.Is(err, plugin.ErrExecutorUnavailable) {
			t.Fatalf("create with a trampoline that cannot confine: %v, want the executor unavailable", err)
		}
	})
	// The trampoline is opened once and every start execs that open file:
	// one swapped in at its path afterwards (a writable install dir) never
	// runs. Before, the path was exec'd at every start.
	t.Run("replaced after start", func(t *testing.T) {
		dir := stub(t, filepath.Join(bin, TrampolineName), 0o755)
		h := open(t, dir, nil)
		evil := stub(t, "/bin/false", 0o755)
		if err := os.Rename(filepath.Join(evil, TrampolineName), filepath.Join(dir, TrampolineName)); err != nil {
			t.Fatal(err)
		}
		task := waitEnd(t, h, alice, create(t, h, alice, map[string]any{"steps": 2}, Limits{}).ID)
		wantStatus(t, task, store.StatusCompleted, "")
		if _, err := h.tools.Call(context.Background(), tools.Env{TaskID: "t_trampolinecheck", Workspace: h.Runner.workspace("t_trampolinecheck")}, tools.ToolShellRun, []byte(`{"command":"true"}`)); err != nil {
			t.Fatalf("shell.run through the swapped path: %v", err)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		h := open(t, stub(t, "/bin/false", 0o777), nil)
		if h.trampoline != nil {
			t.Fatalf("a world-writable trampoline was chosen: %q", h.trampolinePath())
		}
		task := waitEnd(t, h, alice, create(t, h, alice, map[string]any{"steps": 2}, Limits{}).ID)
		wantStatus(t, task, store.StatusCompleted, "")
	})
}
