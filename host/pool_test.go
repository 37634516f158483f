package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// pooledPIDs waits until kind's pool holds n processes and returns them.
func pooledPIDs(t *testing.T, h *Host, kind string, n int) []int {
	t.Helper()
	var s plugin.PoolStatus
	testwait.Until(t, 30*time.Second, fmt.Sprintf("%d pooled %s processes", n, kind), func() bool {
		s = h.Registry.PoolStatus(kind)
		return s.Idle == n
	})
	return s.PIDs
}

func TestPrestartBoundMatchesThePlugins(t *testing.T) {
	if config.MaxPrestart != plugin.MaxPrestart {
		t.Fatalf("config allows prestart up to %d, the registry %d", config.MaxPrestart, plugin.MaxPrestart)
	}
}

// A task's step runs in a plugin process started before the task was
// created: no start on its path. The process is served the task's host
// services (its progress note is recorded) and is never used again.
func TestPooledPluginServesTheTask(t *testing.T) {
	h := openHost(t, "", func(c *config.Config) { c.Tasks.Prestart = 1 })
	before := pooledPIDs(t, h, "testexec", 1)
	dir := testwait.PluginDir(t)
	pidFile := filepath.Join(dir, "pid")
	task := create(t, h, alice, map[string]any{"pid_file": pidFile, "progress": true}, Limits{})
	pid := readPid(t, pidFile)
	if pid != before[0] {
		t.Fatalf("the task's step ran in process %d, want the one pooled before it was created (%d)", pid, before[0])
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	evs, err := h.Runner.Events(context.Background(), alice, task.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e store.Event) bool { return e.Type == EventStepProgress }) {
		t.Fatalf("no progress event: the pooled process was not served the task's services")
	}
	waitGone(t, pid, 5*time.Second)
	if s := h.Registry.PoolStatus("testexec"); s.Served != 1 || slices.Contains(s.PIDs, pid) {
		t.Fatalf("pool status %+v after the task", s)
	}
}

// Two tasks run in pooled processes: killing one's interrupts that task
// alone (executor_crashed), and a cancel of the other reaches its step
// and ends its process, as for a process started for the task.
func TestPooledPluginCrashAndCancel(t *testing.T) {
	h := openHost(t, "", func(c *config.Config) { c.Tasks.Prestart = 2 })
	pooled := pooledPIDs(t, h, "testexec", 2)
	dir := testwait.PluginDir(t)
	crashPid, cancelPid, marker := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "cancelled")
	crashed := create(t, h, alice, map[string]any{"sleep_ms": 60000, "pid_file": crashPid}, Limits{})
	cancelled := create(t, h, alice, map[string]any{"sleep_ms": 60000, "pid_file": cancelPid, "cancel_marker": marker}, Limits{})
	a, b := readPid(t, crashPid), readPid(t, cancelPid)
	if !slices.Contains(pooled, a) || !slices.Contains(pooled, b) || a == b {
		t.Fatalf("tasks ran in %d and %d, want the two pooled %v", a, b, pooled)
	}
	if err := syscallKill(a); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, crashed.ID), store.StatusInterrupted, store.ReasonExecutorCrashed)
	if got, _ := h.Runner.Get(context.Background(), alice, cancelled.ID); got.Status != store.StatusRunning {
		t.Fatalf("the other task is %s after its neighbour's crash, want running", got.Status)
	}
	if _, err := h.Runner.Cancel(context.Background(), alice, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	if got := testwait.File(t, marker); !strings.Contains(got, "cancelled attempt=1") {
		t.Errorf("cancel marker = %q", got)
	}
	waitGone(t, b, 5*time.Second)
	wantStatus(t, waitEnd(t, h, alice, cancelled.ID), store.StatusCancelled, store.ReasonUserCancelled)
}

// A pinned executor's binary replaced while processes of it wait: a create
// is refused with the pin mismatch, and the waiting processes are killed,
// never handed to a task.
func TestPooledPluginOfAReplacedBinary(t *testing.T) {
	dir := testwait.ShortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, datadir.ExecutorPrefix+"testexec")
	orig, err := os.ReadFile(filepath.Join(executorDir(t), datadir.ExecutorPrefix+"testexec"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, orig, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(orig)
	h := openHost(t, "", func(c *config.Config) {
		ex := c.Executors["testexec"]
		ex.Path, ex.SHA256 = bin, hex.EncodeToString(sum[:])
		c.Executors["testexec"] = ex
		c.Tasks.Prestart = 2
	})
	stale := pooledPIDs(t, h, "testexec", 2)
	// Another build at the same path (a running binary cannot be written
	// in place: ETXTBSY), another SHA-256.
	rebuilt := append(orig, "another build"...)
	if err := os.WriteFile(bin+".new", rebuilt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	_, err = h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "after the swap", nil)})
	var ue *plugin.UnavailableError
	if !errors.As(err, &ue) || ue.Check != "checksum" || !strings.Contains(err.Error(), "pin mismatch") {
		t.Fatalf("create after the pinned binary was replaced = %v, want a pin mismatch", err)
	}
	for _, pid := range stale {
		waitGone(t, pid, 10*time.Second)
	}
	if s := h.Registry.PoolStatus("testexec"); s.Served != 0 || s.Idle != 0 {
		t.Fatalf("pool status %+v, want nothing served and nothing waiting", s)
	}

	// Reloaded with the new build's pin: tasks run again, in processes of
	// the new build only.
	cfg := testConfig(t)
	sum = sha256.Sum256(rebuilt)
	ex := cfg.Executors["testexec"]
	ex.Path, ex.SHA256 = bin, hex.EncodeToString(sum[:])
	cfg.Executors["testexec"] = ex
	cfg.Tasks.Prestart = 2
	if err := h.ReloadExecutors(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	fresh := pooledPIDs(t, h, "testexec", 2)
	pidFile := filepath.Join(testwait.PluginDir(t), "pid")
	task := create(t, h, alice, map[string]any{"pid_file": pidFile}, Limits{})
	if pid := readPid(t, pidFile); !slices.Contains(fresh, pid) {
		t.Fatalf("after the reload the task ran in %d, want one of the new build's %v", pid, fresh)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
}

// A machinespirit task runs in a process started (with its Prolog worker,
// from its own copy of the seed cache) before the task was created.
func TestPooledMachineSpirit(t *testing.T) {
	h := openHost(t, "", func(c *config.Config) {
		c.MachineSpirit.Enabled = true
		one := 1
		c.MachineSpirit.Prestart = &one
	})
	before := pooledPIDs(t, h, "machinespirit", 1)
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit",
		Spec: []byte(`{"goal":"plan","machinespirit":{"graph":"plan_act_review","input":{"tasks":["a","b"],"pass_on_attempt":1,"max_attempts":1}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	if s := h.Registry.PoolStatus("machinespirit"); s.Served != 1 || s.Cold != 0 || slices.Contains(s.PIDs, before[0]) {
		t.Fatalf("pool status %+v: the task was not served by the pooled process %d", s, before[0])
	}
	waitGone(t, before[0], 10*time.Second)
}
