package host

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// crashLatency SIGKILLs a plugin parked in a step and times the kill to the
// task read back interrupted from the store. With grandchild the plugin
// first leaves a "sleep 300" holding its stderr pipe.
func crashLatency(t *testing.T, h *Host, dir string, i int, grandchild bool) time.Duration {
	t.Helper()
	pidFile := filepath.Join(dir, "pid-"+strconv.FormatBool(grandchild)+"-"+strconv.Itoa(i))
	task := create(t, h, alice, map[string]any{"sleep_ms": 600000, "pid_file": pidFile, "spawn_grandchild": grandchild}, Limits{})
	pid := readPid(t, pidFile)
	gc := 0
	if grandchild {
		// Written after the pid file: kill only once it holds the pipe.
		gc = readPid(t, pidFile+".grandchild")
	}
	start := time.Now()
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	for {
		got, err := h.Runner.Get(context.Background(), alice, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == store.StatusInterrupted {
			took = time.Since(start)
			wantStatus(t, got, store.StatusInterrupted, store.ReasonExecutorCrashed)
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("task %s not interrupted 30 s after its plugin's SIGKILL", task.ID)
		}
		time.Sleep(100 * time.Microsecond)
	}
	waitEnd(t, h, alice, task.ID)
	if gc > 0 {
		waitGone(t, gc, 5*time.Second)
	}
	return took
}

// A grandchild holding the plugin's stderr must not delay the crash
// verdict: the wait status decides, and the stderr tail is drained only
// while bytes are left in the pipe. Both kinds are measured interleaved in
// the same run; before the fix the grandchild added the whole 250 ms
// settle wait for an EOF that never came.
func TestCrashLatencyGrandchildHoldingStderr(t *testing.T) {
	h := openHost(t, "", nil)
	dir := testwait.PluginDir(t)
	const reps = 7
	var plain, held []time.Duration
	for i := range reps {
		plain = append(plain, crashLatency(t, h, dir, i, false))
		held = append(held, crashLatency(t, h, dir, i, true))
	}
	slices.Sort(plain)
	slices.Sort(held)
	mp, mh := plain[reps/2], held[reps/2]
	t.Logf("SIGKILL → interrupted persisted, median of %d: %v without a grandchild, %v with one (%.2fx); fastest %v and %v", reps, mp, mh, float64(mh)/float64(mp), plain[0], held[0])
	// The target is 10 ms on a quiet machine. A settle that waits for EOF
	// adds the 50 ms bound that caps the drain to every sample, so the
	// fastest of each kind are compared: a loaded machine's stalls do not
	// hit all seven, the bug would. The margin is half that bound.
	if held[0] > plain[0]+25*time.Millisecond {
		t.Errorf("the grandchild delays crash detection: fastest %v, %v without (medians %v, %v)", held[0], plain[0], mh, mp)
	}
}
