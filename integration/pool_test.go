package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// children lists the live processes whose parent is pid.
func children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if child, err := strconv.Atoi(e.Name()); err == nil && ppidOK(child) == pid && alive(child) {
			out = append(out, child)
		}
	}
	return out
}

// A SIGKILLed daemon leaves none of its pre-started plugin processes
// running: they die with it as a task's plugin does.
func TestDaemonKilledLeavesNoPooledPlugin(t *testing.T) {
	data, work := testwait.ShortTempDir(t), testwait.PluginDir(t)
	cfg := writeConfig(t, work, fmt.Sprintf("[tasks]\nprestart = 3\n[executors.testexec]\npath = %q\nread_write = [%q]\n",
		filepath.Join(binDir, "taskhost-executor-testexec"), work))
	d := startDaemon(t, data, cfg)
	var pooled []int
	// testexec and legacy, 3 each, and nothing else runs.
	testwait.Until(t, 60*time.Second, "6 pooled plugin processes", func() bool {
		pooled = children(d.cmd.Process.Pid)
		return len(pooled) >= 6
	})
	d.kill(t)
	for _, pid := range pooled {
		testwait.Until(t, 10*time.Second, fmt.Sprintf("pooled plugin %d to die with its daemon", pid), func() bool { return !alive(pid) })
	}
}
