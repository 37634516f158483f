package machinespirit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/internal/confine"
)

// Bounds and defaults of the worker's resource limits. They are per worker
// process: one worker serves one task, across its steps.
const (
	DefaultWorkerMemoryBytes = 1 << 30 // RLIMIT_AS
	MinWorkerMemoryBytes     = 256 << 20
	MaxWorkerMemoryBytes     = 64 << 30

	DefaultWorkerCPUSeconds = 3600 // RLIMIT_CPU
	MinWorkerCPUSeconds     = 1
	MaxWorkerCPUSeconds     = 86400

	// workerNoFile is RLIMIT_NOFILE: the worker needs its standard
	// streams, two protocol pipes (and their reopened copies), its saved
	// state and a few library files.
	workerNoFile = 64

	// workDirName is the worker's working directory inside the runtime's
	// private dir: empty, 0700, and nothing of the plugin's above it is
	// writable by anyone else.
	workDirName = "work"
)

// checkLimits validates the worker limits of cfg (after withDefaults).
func checkLimits(cfg Config) error {
	if m := cfg.WorkerMemoryBytes; m < MinWorkerMemoryBytes || m > MaxWorkerMemoryBytes {
		return failCheck("worker_memory", "worker memory %d bytes is outside [%d, %d]", m, MinWorkerMemoryBytes, MaxWorkerMemoryBytes)
	}
	if c := cfg.WorkerCPUSeconds; c < MinWorkerCPUSeconds || c > MaxWorkerCPUSeconds {
		return failCheck("worker_cpu", "worker CPU time %d seconds is outside [%d, %d]", c, MinWorkerCPUSeconds, MaxWorkerCPUSeconds)
	}
	if p := cfg.MaxParallelModelCalls; p < 1 || p > MaxParallelModelCalls {
		return failCheck("max_parallel_model_calls", "max_parallel_model_calls %d is outside [1, %d]", p, MaxParallelModelCalls)
	}
	return nil
}

// workerPolicy is the confinement of every worker: an empty private
// working directory; read-only access to the system's libraries, the
// Prolog home and the runtime's staged sources and saved state; write
// access to nothing but its working directory and /dev/null; no new
// processes, no exec, no sockets but AF_UNIX, no ptrace (seccomp); no
// capabilities; bounded address space, CPU time and open files.
func workerPolicy(cfg Config, runtimeDir, workDir string) confine.Policy {
	var ro []string
	for _, p := range []string{"/usr", "/lib", "/lib64", "/lib32", "/etc", "/sys/devices/system/cpu", runtimeDir} {
		if _, err := os.Stat(p); err == nil {
			ro = append(ro, p)
		}
	}
	if dir := filepath.Dir(cfg.SwiplPath); !underAny(dir, ro) {
		ro = append(ro, dir)
	}
	return confine.Policy{
		Dir:       workDir,
		ReadOnly:  ro,
		ReadWrite: []string{workDir, os.DevNull},
		Landlock:  confine.LandlockBestEffort,
		// RLIMIT_AS is not set here: the trampoline is a Go program that
		// keeps running (and allocating) after its rlimits are set, and a
		// Go binary's address space is larger than a worker's limit.
		// limitAddressSpace sets it on swipl once it has said hello,
		// before it is given anything to run.
		Rlimits: confine.Rlimits{
			CPUSeconds: uint64(cfg.WorkerCPUSeconds),
			NoFile:     workerNoFile,
		},
		Seccomp:   confine.Seccomp{DenyExec: true, DenyFork: true, DenyNetwork: true, DenyPtrace: true},
		DropCaps:  capSetPCAP(),
		Pdeathsig: syscall.SIGKILL,
	}
}

// capSetPCAP reports whether this process may drop the worker's
// capabilities (CAP_SETPCAP in its effective set). Under the host's own
// confinement the plugin has none left to drop, and asking for it would
// fail the trampoline.
func capSetPCAP() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SETPCAP) != 0
		}
	}
	return false
}

func underAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if rel, err := filepath.Rel(d, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

// limitAddressSpace sets the worker's RLIMIT_AS (soft and hard).
func limitAddressSpace(pid int, bytes int64) error {
	v := uint64(bytes)
	if err := unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: v, Max: v}, nil); err != nil {
		return fmt.Errorf("RLIMIT_AS of worker %d: %w", pid, err)
	}
	return nil
}

// makeWorkDir creates the worker's empty private working directory.
func makeWorkDir(runtimeDir string) (string, error) {
	dir := filepath.Join(runtimeDir, workDirName)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("worker dir: %w", err)
	}
	return dir, nil
}

// resourceDeath says whether the worker died of one of its limits. At its
// soft RLIMIT_CPU the kernel sends SIGXCPU (the hard limit is a second
// more, and sends SIGKILL), so a worker killed by either that used its CPU
// time, give or take the kernel's tick, died of the limit. An allocation refused under
// RLIMIT_AS ends swipl with a message naming memory.
func resourceDeath(exitErr error, cpuLimit int64, stderrTail string) (string, bool) {
	var ee *exec.ExitError
	if errors.As(exitErr, &ee) {
		ws, ok := ee.Sys().(syscall.WaitStatus)
		used := ee.UserTime() + ee.SystemTime()
		if ok && ws.Signaled() && (ws.Signal() == syscall.SIGXCPU ||
			ws.Signal() == syscall.SIGKILL && used >= cpuFloor(cpuLimit)) {
			return fmt.Sprintf("the worker used up its CPU time (%s of RLIMIT_CPU %ds)", used.Round(time.Millisecond), cpuLimit), true
		}
	}
	for _, s := range []string{"could not allocate memory", "out of memory", "cannot allocate memory", "std::bad_alloc"} {
		if strings.Contains(strings.ToLower(stderrTail), s) {
			return "the worker ran out of memory (RLIMIT_AS)", true
		}
	}
	return "", false
}

// cpuFloor is the least CPU time a worker killed by SIGKILL must have used
// to count as killed by its limit: the kernel enforces RLIMIT_CPU on the
// scheduler's exact runtime, while the reaped rusage is tick-scaled and was
// seen short of the limit on a loaded machine, so a quarter of the limit
// (at least 200 ms) is allowed below it.
func cpuFloor(limitSeconds int64) time.Duration {
	limit := time.Duration(limitSeconds) * time.Second
	return limit - max(200*time.Millisecond, limit/4)
}
