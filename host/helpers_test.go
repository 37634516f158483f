package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// executors builds the executor binaries, and the dedicated trampoline
// beside them as `make build` puts it, the first time a test needs them:
// the seam's in-process tests run without building any.
var executors = testbin.Lazy("thbin",
	testbin.Build{Package: testbin.Confine},
	testbin.Executor("testexec", testbin.Testexec),
	testbin.Executor("legacy", testbin.Legacy),
	testbin.Executor("machinespirit", testbin.MachineSpirit))

// executorsBuilt says executors ran, so TestMain removes their dir.
var executorsBuilt atomic.Bool

// executorDir is the directory of the executor binaries, built on first use.
func executorDir(tb testing.TB) string {
	tb.Helper()
	dir, err := executors()
	executorsBuilt.Store(true)
	if err != nil {
		tb.Fatalf("build the executors: %v", err)
	}
	return dir
}

func TestMain(m *testing.M) {
	// The test binary is the plugins' trampoline.
	confine.Main()
	code := testpg.Run(m)
	if executorsBuilt.Load() {
		if dir, err := executors(); err == nil {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

const alice, bob = "alice", "bob"

// testConfig is the default config with the test executor as default.
func testConfig(tb testing.TB) config.Config {
	tb.Helper()
	c := config.Default()
	// required fails closed without Landlock: on such a kernel the tests
	// opt out, as an operator would, and the confinement tests say so.
	c.Confinement.Required = confine.Probe().LandlockABI >= 1
	c.Tasks.Executor = "testexec"
	c.Tasks.MaxConcurrent = 16
	// The test executor writes its pid and environment files where a test
	// tells it, in temp dirs a confined plugin could not reach otherwise.
	c.Executors["testexec"] = config.Executor{
		Path:      filepath.Join(executorDir(tb), datadir.ExecutorPrefix+"testexec"),
		ReadWrite: []string{os.TempDir()},
		// Some tests have it start grandchildren.
		Subprocesses: true,
	}
	return c
}

// openHost opens a host on dir (a fresh one when dir is empty) and closes
// it at the end of the test.
func openHost(t *testing.T, dir string, mutate func(*config.Config)) *Host {
	t.Helper()
	if dir == "" {
		dir = testwait.ShortTempDir(t)
	}
	cfg := testConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	return openHostWith(t, Options{DataDir: dir, Config: cfg})
}

// openHostWith opens a host with opts, on the test executors unless
// opts.ExecutorDir names others, and closes it at the end of the test.
func openHostWith(t *testing.T, opts Options) *Host {
	t.Helper()
	if opts.ExecutorDir == "" {
		opts.ExecutorDir = executorDir(t)
	}
	h, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open host: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h.Close(ctx)
	})
	return h
}

// spec builds a test executor spec.
func spec(t *testing.T, goal string, te map[string]any) []byte {
	t.Helper()
	s := map[string]any{"goal": goal}
	if te != nil {
		s["testexec"] = te
	}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func create(t *testing.T, h *Host, principal string, te map[string]any, limits Limits) store.Task {
	t.Helper()
	task, err := h.Runner.Create(context.Background(), principal, CreateRequest{Executor: "testexec", Spec: spec(t, "test goal", te), Limits: limits})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return task
}

// waitEnd waits for the task's run to end and returns the task.
func waitEnd(t *testing.T, h *Host, principal, id string) store.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Runner.Wait(ctx, id); err != nil {
		t.Fatalf("task %s did not end: %v", id, err)
	}
	task, err := h.Runner.Get(ctx, principal, id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// readPid reads a pid file the test executor wrote.
func readPid(t *testing.T, path string) int {
	t.Helper()
	s := strings.TrimSpace(testwait.File(t, path))
	pid, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("pid file %s: %q", path, s)
	}
	return pid
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	testwait.Until(t, d, fmt.Sprintf("process %d to be gone", pid), func() bool { return !alive(pid) })
}

func wantStatus(t *testing.T, task store.Task, status store.Status, reason store.Reason) {
	t.Helper()
	if task.Status != status || task.Reason != reason {
		t.Fatalf("task %s is %s (%s: %s), want %s (%s)", task.ID, task.Status, task.Reason, task.Message, status, reason)
	}
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// setLimits changes a running Runner's concurrency bound and, when queued
// is above 0, its queue bound, under the lock its queue loop reads them
// with.
func (r *Runner) setLimits(concurrent, queued int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set.MaxConcurrent = concurrent
	if queued > 0 {
		r.set.MaxQueued = queued
	}
}

func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
