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
	t.Parallel()
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

// /metrics shows each executor's pool: full once it is filled, a launch
// served by a pooled process once a task ran, and the refill after it.
func TestDaemonMetricsShowThePool(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, writeConfig(t, work, "[api]\nmetrics_listen = \"127.0.0.1:0\"\n[tasks]\nprestart = 2\n"))
	base := "http://" + metricsAddr(t, d)
	const idle, size, pooled = `taskhost_plugin_pool_idle{executor="testexec"}`, `taskhost_plugin_pool_size{executor="testexec"}`,
		`taskhost_plugin_pool_launches_total{executor="testexec",source="pooled"}`
	var m map[string]float64
	testwait.Until(t, 60*time.Second, "a scrape showing testexec's pool full", func() bool {
		_, body := get(t, base+"/metrics")
		m = samples(t, body)
		return m[idle] == 2
	})
	if m[size] != 2 || m[pooled] != 0 {
		t.Fatalf("before any task: size %v, pooled launches %v; want 2 and 0", m[size], m[pooled])
	}
	id := createTask(t, d, work, map[string]any{"goal": "pooled", "testexec": map[string]any{"steps": 1}})
	w := startWatch(t, d, id)
	if final, code := w.result(t); code != 0 || final.Status != "completed" {
		t.Fatalf("task ended %+v (exit %d)", final, code)
	}
	testwait.Until(t, 60*time.Second, "a scrape showing the pooled launch and the pool refilled", func() bool {
		_, body := get(t, base+"/metrics")
		m = samples(t, body)
		return m[pooled] == 1 && m[idle] == 2
	})
	if started := m[`taskhost_plugin_pool_started_total{executor="testexec"}`]; started < 3 {
		t.Errorf("pooled processes started = %v, want at least 3 (2, then the refill)", started)
	}
}
