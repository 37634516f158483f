package host

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// entries returns the JSON log entries whose message contains msg.
func logEntries(t *testing.T, b *syncBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("host log line %q: %v", sc.Text(), err)
		}
		if s, _ := m["@message"].(string); strings.Contains(s, msg) {
			out = append(out, m)
		}
	}
	return out
}

// openLoggedHost is openHost with a JSON host log the test can read.
func openLoggedHost(t *testing.T) (*Host, *syncBuffer) {
	t.Helper()
	var logBuf syncBuffer
	log := hclog.New(&hclog.LoggerOptions{Name: "taskhost", Output: &logBuf, Level: hclog.Info, JSONFormat: true})
	h := openHostWith(t, Options{DataDir: testwait.ShortTempDir(t), Config: testConfig(t), Logger: log})
	return h, &logBuf
}

// A real plugin's sdk.Logger line at WARN, written during a step, reaches
// the host log at WARN with the task, run, attempt and executor it came
// from; the plugin's own "task" field cannot pass for another task.
func TestPluginLogLineReachesHostLog(t *testing.T) {
	t.Parallel()
	h, logBuf := openLoggedHost(t)
	task := create(t, h, alice, map[string]any{"log_warn": "testexec warns", "stderr_lines": 2}, Limits{})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusCompleted, "")
	var warn, plain []map[string]any
	testwait.Until(t, 5*time.Second, "the forwarded lines", func() bool {
		warn, plain = logEntries(t, logBuf, "testexec warns"), logEntries(t, logBuf, "testexec: stderr line")
		return len(warn) == 1 && len(plain) == 2
	})
	e := warn[0]
	want := map[string]any{"@level": "warn", "task": task.ID, "run": float64(1), "attempt": float64(1),
		"executor": "testexec", "plugin_task": "t_forged", "source": "plugin"}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("forwarded WARN line: %s = %v, want %v (%v)", k, e[k], v, e)
		}
	}
	if p := plain[0]; p["@level"] != "info" || p["task"] != task.ID || p["executor"] != "testexec" || p["source"] != "plugin" {
		t.Errorf("forwarded plain stderr line %v, want INFO with the task and executor", p)
	}
}

// A plugin flooding stderr during a step gets the burst into the host log,
// the rest counted in reports; the task is not held up. sdk.Logger writes
// to the process's stderr, so no line is lost at the plugin's stop.
func TestPluginLogFloodBounded(t *testing.T) {
	t.Parallel()
	h, logBuf := openLoggedHost(t)
	// logBurst is host/plugin's burst of forwarded lines (docs/operations.md).
	const logBurst = 100
	const lines = 20 * logBurst
	task := create(t, h, alice, map[string]any{"log_lines": lines}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	var forwarded, dropped int
	testwait.Until(t, 10*time.Second, "every line forwarded or counted", func() bool {
		forwarded, dropped = len(logEntries(t, logBuf, "testexec: log line")), 0
		for _, e := range logEntries(t, logBuf, "plugin stderr lines dropped") {
			dropped += int(e["dropped_lines"].(float64))
		}
		// The plugin's other lines (its stop notice) may be dropped too.
		return forwarded+dropped >= lines
	})
	// The bucket refills while the lines arrive: at least the burst, far
	// fewer than were written.
	if forwarded < logBurst || forwarded > lines/2 {
		t.Errorf("forwarded %d of %d lines, want between the burst %d and half", forwarded, lines, logBurst)
	}
}
