package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// What a plugin logs during a step lands in the daemon's log with the
// task's id and the executor; when the step then crashes, the panic is in
// the attempt's stderr tail and in plain `task status`.
func TestDaemonForwardsPluginLogAndShowsCrashTail(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, testexecConfig(t, work))
	id := createTask(t, d, work, map[string]any{"goal": "log then crash",
		"testexec": map[string]any{"log_warn": "testexec warns before it panics", "panic_at_attempt": 1}})
	w := startWatch(t, d, id)
	if final, code := w.result(t); final.Status != "interrupted" || final.Reason != "executor_crashed" || code != 6 {
		t.Fatalf("task ended %s (%s), watch exit %d; want interrupted (executor_crashed), exit 6", final.Status, final.Reason, code)
	}

	var line map[string]any
	testwait.Until(t, 10*time.Second, "the forwarded WARN line in the daemon log", func() bool {
		for _, l := range strings.Split(d.logText(), "\n") {
			if strings.Contains(l, "testexec warns before it panics") && json.Unmarshal([]byte(l), &line) == nil {
				return true
			}
		}
		return false
	})
	for k, want := range map[string]any{"@level": "warn", "task": id, "executor": "testexec", "run": float64(1), "attempt": float64(1)} {
		if line[k] != want {
			t.Errorf("forwarded line: %s = %v, want %v (%v)", k, line[k], want, line)
		}
	}

	var st statusJSON
	d.cliJSON(t, &st, "task", "status", id)
	if len(st.Attempts) != 1 || !strings.Contains(st.Attempts[0].StderrTail, "panic: testexec: scripted panic") {
		t.Fatalf("attempts %+v: want one whose stderr tail has the panic", st.Attempts)
	}
	out, errOut, code := d.cli(t, "task", "status", id)
	if code != 0 || !strings.Contains(out, "attempt 1: last stderr lines of the plugin") || !strings.Contains(out, "  | panic: testexec: scripted panic") {
		t.Fatalf("task status (exit %d) does not show the crash's stderr tail:\n%s%s", code, out, errOut)
	}
}
