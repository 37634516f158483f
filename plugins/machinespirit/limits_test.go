package machinespirit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

// procStatus returns the fields of /proc/<pid>/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// TestWorkerConfined: the running worker has no_new_privs, a seccomp
// filter, no capabilities, its limits, and an empty private working
// directory that is not the runtime dir.
func TestWorkerConfined(t *testing.T) {
	cfg := testConfig(t, nil)
	cfg.WorkerMemoryBytes = 700 << 20
	cfg.WorkerCPUSeconds = 1234
	e := newExecutor(t, cfg)
	if got := e.Describe().Runtime["worker_confinement"]; !strings.Contains(got, "no_new_privs") || !strings.Contains(got, "seccomp") || !strings.Contains(got, "rlimits") {
		t.Errorf("Describe: worker_confinement = %q", got)
	}
	pid := e.workerPID()
	st := procStatus(t, pid)
	for k, want := range map[string]string{"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000", "CapBnd": "0000000000000000", "CapPrm": "0000000000000000"} {
		if st[k] != want {
			t.Errorf("%s = %q, want %q", k, st[k], want)
		}
	}
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("Max address space         %-20d %-20d bytes", 700<<20, 700<<20),
		// The hard limit is a second past the soft one: SIGXCPU first.
		fmt.Sprintf("Max cpu time              %-20d %-20d seconds", 1234, 1235),
		fmt.Sprintf("Max open files            %-20d %-20d files", workerNoFile, workerNoFile),
	} {
		if !strings.Contains(string(limits), want) {
			t.Errorf("limits lack %q:\n%s", want, limits)
		}
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(cwd)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(cwd)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 || len(ents) != 0 || cwd != e.env.work {
		t.Fatalf("cwd %s: mode %v, %d entries (want the empty 0700 %s)", cwd, fi.Mode().Perm(), len(ents), e.env.work)
	}
}

// TestWorkerLimitsBounds: limits outside their bounds fail the preflight,
// naming the check, the limit and the value.
func TestWorkerLimitsBounds(t *testing.T) {
	needSwipl(t)
	for _, tc := range []struct {
		name     string
		mem, cpu int64
		want     string
	}{
		{"memory one below", MinWorkerMemoryBytes - 1, 0, fmt.Sprintf("worker_memory: worker memory %d bytes is outside [%d, %d]", MinWorkerMemoryBytes-1, MinWorkerMemoryBytes, MaxWorkerMemoryBytes)},
		{"memory one above", MaxWorkerMemoryBytes + 1, 0, "worker_memory:"},
		{"cpu one above", 0, MaxWorkerCPUSeconds + 1, fmt.Sprintf("worker_cpu: worker CPU time %d seconds is outside [%d, %d]", MaxWorkerCPUSeconds+1, MinWorkerCPUSeconds, MaxWorkerCPUSeconds)},
		{"cpu negative", 0, -1, "worker_cpu:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, nil)
			cfg.WorkerMemoryBytes, cfg.WorkerCPUSeconds = tc.mem, tc.cpu
			e := New(context.Background(), cfg)
			defer e.Close()
			if p := e.Describe().Runtime["preflight"]; !strings.Contains(p, tc.want) {
				t.Fatalf("preflight %q, want %q", p, tc.want)
			}
		})
	}
	t.Run("at the bounds", func(t *testing.T) {
		cfg := testConfig(t, nil)
		cfg.WorkerMemoryBytes, cfg.WorkerCPUSeconds = MinWorkerMemoryBytes, MaxWorkerCPUSeconds
		newExecutor(t, cfg)
	})
}

// TestWorkerCPULimit: a node that computes past the worker's CPU time
// fails the step as resource_exhausted (never a completion, never a
// plugin crash), and the next step gets a new worker.
func TestWorkerCPULimit(t *testing.T) {
	src := g("spinner", okState, `nodes([node(a, spin, [node_seconds(60), node_inferences(2000000000)])])`, okEdges)
	cfg := testConfig(t, map[string]string{"spinner": src, "noop": g("noop", okState, okNodes, okEdges)})
	cfg.WorkerCPUSeconds = 2
	lost := false
	cfg.OnWorkerLost = func(error) { lost = true }
	e := newExecutor(t, cfg)
	pid := e.workerPID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.Step(ctx, newFakeHost(1), stepReq(spec("spinner", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, "machinespirit: resource_exhausted: the worker used up its CPU time") {
		t.Fatalf("step: %+v, %v", res, err)
	}
	if lost {
		t.Fatal("a worker at its CPU limit was reported lost (a crash)")
	}
	res, err = e.Step(ctx, newFakeHost(1), stepReq(spec("noop", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeComplete {
		t.Fatalf("the next step: %+v, %v", res, err)
	}
	if e.workerPID() == pid {
		t.Fatal("the worker was not replaced")
	}
}

// TestWorkerMemoryLimit: with stack limits far above the worker's address
// space, a goal that grows its stacks past RLIMIT_AS gets an error it can
// read (the allocation fails inside the worker), the loop goes on, and
// the worker's virtual size never passed the limit.
func TestWorkerMemoryLimit(t *testing.T) {
	cfg := testConfig(t, nil)
	cfg.WorkerMemoryBytes = MinWorkerMemoryBytes
	cfg.StackLimitBytes, cfg.TaskStackLimitBytes = 4<<30, 4<<30
	e := newExecutor(t, cfg)
	r := runGoal(t, e, "length(L, 100000000)")
	if !strings.Contains(r.feedback, "=> error:") || !strings.Contains(r.feedback, "stack") {
		t.Fatalf("feedback: %s", r.feedback)
	}
	peak := procStatus(t, e.workerPID())["VmPeak"]
	kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(peak, "kB")))
	if err != nil {
		t.Fatalf("VmPeak %q: %v", peak, err)
	}
	t.Logf("worker VmPeak %d KiB under RLIMIT_AS %d KiB", kib, MinWorkerMemoryBytes>>10)
	if kib > MinWorkerMemoryBytes>>10 {
		t.Fatalf("VmPeak %d KiB over the limit", kib)
	}
}

// TestWorkerSeccompAndLandlock: code inside the worker — even trusted
// handler code — cannot start a process (seccomp: a shell command that
// would create a file in the worker's own, writable directory leaves it
// empty) nor open files outside its directory (Landlock), and the worker
// lives on.
func TestWorkerSeccompAndLandlock(t *testing.T) {
	probe := t.TempDir() + "/escaped"
	src := g("escape", `state([field(answer, string, "", replace)])`,
		fmt.Sprintf(`nodes([node(a, escape(%q))])`, probe), `edges([edge(start, a), edge(a, end)])`)
	e := newExecutor(t, testConfig(t, map[string]string{"escape": src}))
	res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("escape", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeComplete {
		t.Fatalf("step: %+v, %v", res, err)
	}
	if !strings.Contains(string(res.Result), "open=permission_error dir=permission_error") {
		t.Fatalf("Landlock let a file outside the worker's directory open: %s", res.Result)
	}
	if _, err := os.Stat(probe); err == nil {
		t.Fatal("the marker file was created")
	}
	if ents, err := os.ReadDir(e.env.work); err != nil || len(ents) != 0 {
		t.Fatalf("the worker's directory holds %v (%v): a shell command ran", ents, err)
	}
	if res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("escape", nil, ""), nil)); err != nil || res.Outcome != sdk.OutcomeComplete {
		t.Fatalf("second step: %+v, %v", res, err)
	}
}
