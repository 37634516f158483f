package machinespirit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// peakRSSKiB is VmHWM of a live process: its peak resident set in KiB.
func peakRSSKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return n
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// TestHugeAtomPeakRSS: the goal of issue 14 that built a 400,000,000
// character atom (799 MB, then 3.6 GB when its binding was printed) now
// stops at the concatenation's length check, its 200,000-character atom
// is shown by size, and the worker's peak RSS stays small.
func TestHugeAtomPeakRSS(t *testing.T) {
	e := newExecutor(t, testConfig(t, nil))
	const goal = "length(L, 200000), maplist(=(0'a), L), atom_codes(A, L), findall(A, between(1, 2000, _), As), atomic_list_concat(As, B)"
	r := runGoal(t, e, goal)
	if !strings.Contains(r.feedback, "would build a text of 400,000,000 characters") {
		t.Fatalf("feedback: %s", r.feedback)
	}
	r = runGoal(t, e, "length(L, 200000), maplist(=(0'a), L), atom_codes(A, L)")
	if !strings.Contains(r.feedback, "<atom of 200,000 characters") {
		t.Fatalf("feedback: %s", r.feedback)
	}
	pid := e.workerPID()
	if pid == 0 {
		t.Fatal("no worker")
	}
	peak := peakRSSKiB(t, pid)
	t.Logf("worker peak RSS (VmHWM) after the huge-atom goals: %d KiB", peak)
	const bound = 150 << 10 // KiB
	if peak > bound {
		t.Fatalf("worker peak RSS %d KiB, want at most %d KiB", peak, bound)
	}
}
