package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

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
		if err := os.WriteFile(filepath.Join(dir, datadir.TrampolineName), data, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, datadir.TrampolineName), mode); err != nil {
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
		if want := filepath.Join(bin, datadir.TrampolineName); h.dir.TrampolinePath() != want {
			t.Fatalf("trampoline %q, want %q", h.dir.TrampolinePath(), want)
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
		dir := stub(t, filepath.Join(bin, datadir.TrampolineName), 0o755)
		h := open(t, dir, nil)
		evil := stub(t, "/bin/false", 0o755)
		if err := os.Rename(filepath.Join(evil, datadir.TrampolineName), filepath.Join(dir, datadir.TrampolineName)); err != nil {
			t.Fatal(err)
		}
		task := waitEnd(t, h, alice, create(t, h, alice, map[string]any{"steps": 2}, Limits{}).ID)
		wantStatus(t, task, store.StatusCompleted, "")
		if _, err := h.dir.Tools.Call(context.Background(), tools.Env{TaskID: "t_trampolinecheck", Workspace: h.Runner.workspace("t_trampolinecheck")}, tools.ToolShellRun, []byte(`{"command":"true"}`)); err != nil {
			t.Fatalf("shell.run through the swapped path: %v", err)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		h := open(t, stub(t, "/bin/false", 0o777), nil)
		if h.dir.TrampolinePath() != "" {
			t.Fatalf("a world-writable trampoline was chosen: %q", h.dir.TrampolinePath())
		}
		task := waitEnd(t, h, alice, create(t, h, alice, map[string]any{"steps": 2}, Limits{}).ID)
		wantStatus(t, task, store.StatusCompleted, "")
	})
}
