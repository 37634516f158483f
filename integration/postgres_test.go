package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
)

// postgresConfig is testexecConfig with the store in the database whose DSN
// the test put in the variable env (the daemon inherits the test's
// environment).
func postgresConfig(t *testing.T, work, env string) string {
	t.Helper()
	return writeConfig(t, work, fmt.Sprintf("[executors.testexec]\npath = %q\nread_write = [%q]\n\n[store]\ndriver = \"postgres\"\ndsn_env = %q\n",
		filepath.Join(binDir, "taskhost-executor-testexec"), work, env))
}

// TestDaemonOnPostgres runs the real daemon on a PostgreSQL store: a task
// created, watched and completed; then a daemon SIGKILLed mid-step, a new
// one that finds the task interrupted (host_restart), and a resume that
// completes it with what was left of its budget. No store file is made.
func TestDaemonOnPostgres(t *testing.T) {
	t.Parallel()
	env := dsnEnv(t, testpg.DSN(t))
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, postgresConfig(t, work, env))

	id := createTask(t, d, work, map[string]any{"goal": "count to three", "testexec": map[string]any{"steps": 3, "sleep_ms": 20}}, "--max-steps", "5")
	final, code := startWatch(t, d, id).result(t)
	if code != 0 || final.Status != "completed" || final.Budgets["steps"] != (meterJSON{Used: 3, Limit: 5}) {
		t.Fatalf("watch ended with exit %d, task %+v", code, final)
	}

	pidFile := filepath.Join(work, "pid")
	id = createTask(t, d, work, map[string]any{"goal": "survive", "testexec": map[string]any{
		"steps": 2, "pid_file": pidFile, "sleep_at_attempt": 2, "long_sleep_ms": 60000,
	}}, "--max-steps", "6")
	w := startWatch(t, d, id)
	w.until(t, event("step.started", 2))
	plugin := readPid(t, pidFile)
	d.kill(t)
	testwait.Until(t, 5*time.Second, "the plugin to die with its daemon", func() bool { return !alive(plugin) })

	d2 := startDaemon(t, data, postgresConfig(t, work, env))
	var st statusJSON
	d2.cliJSON(t, &st, "task", "status", id)
	if st.Task.Status != "interrupted" || st.Task.Reason != "host_restart" {
		t.Fatalf("after the kill: %+v", st.Task)
	}
	out, errOut, code := d2.cli(t, "task", "resume", id, "--watch", "--json")
	if code != 0 || !strings.Contains(out, `"kind":"result"`) {
		t.Fatalf("resume --watch: exit %d\n%s%s", code, out, errOut)
	}
	d2.cliJSON(t, &st, "task", "status", id)
	if st.Task.Status != "completed" || st.Task.RunID != 2 || len(st.Attempts) != 3 ||
		st.Attempts[1].Status != "interrupted" || st.Attempts[1].Reason != "host_restart" {
		t.Fatalf("after resume: %+v", st)
	}
	if s := st.Task.Budgets["steps"]; s != (meterJSON{Used: 3, Limit: 6}) {
		t.Errorf("steps %+v: the killed attempt costs a step, the limit stays", s)
	}
	if _, err := os.Lstat(filepath.Join(data, "taskhost.db")); !os.IsNotExist(err) {
		t.Errorf("a postgres daemon made a store file: %v", err)
	}
	// The commands that read the store file point at pg_dump instead.
	for _, args := range [][]string{{"backup", filepath.Join(work, "b")}, {"inspect"}} {
		_, errOut, code := d2.cli(t, args...)
		if code == 0 || !strings.Contains(errOut, "pg_dump") {
			t.Errorf("taskhost %s on a postgres data dir: exit %d\n%s", args[0], code, errOut)
		}
	}
}

// TestBenchCommandPostgres runs taskhost bench on a PostgreSQL store: the
// step and its floor are measured there, 12 tasks on one host and over
// three hosts of the store (every step of every round counted, and their
// ratio in fleet_throughput), recovery is reported skipped, and a missing
// DSN variable is a usage error naming it.
func TestBenchCommandPostgres(t *testing.T) {
	t.Parallel()
	env := dsnEnv(t, testpg.DSN(t))
	// About 50 s on a loaded 2-core machine: bounded well past that.
	out, errOut, code := taskhostFor(t, 5*time.Minute, "bench", "--store", "postgres", "--dsn-env", env, "--steps", "60", "--reps", "2", "--json")
	if code != 0 {
		t.Fatalf("bench exit %d: %s", code, errOut)
	}
	var r struct {
		Figures []struct {
			Name   string `json:"name"`
			N      int    `json:"n"`
			Median int64  `json:"median_ns"`
			Note   string `json:"note"`
		} `json:"figures"`
		StepRatio       float64 `json:"step_ratio"`
		FleetThroughput float64 `json:"fleet_throughput"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	if r.StepRatio <= 0 || len(r.Figures) < 7 || r.FleetThroughput <= 0 {
		t.Fatalf("report %+v", r)
	}
	skipped := false
	// 12 tasks of 60 timed steps each, in each of 3 rounds.
	fleet := map[string]bool{"durable step, 12 tasks on 1 host": false, "durable step, 12 tasks over 3 hosts (one store, one machine)": false}
	for _, f := range r.Figures {
		t.Logf("%-70s n=%-4d median %v %s", f.Name, f.N, time.Duration(f.Median), f.Note)
		skipped = skipped || (f.Name == "start-up recovery" && strings.Contains(f.Note, "SQLite only"))
		if _, ok := fleet[f.Name]; ok {
			fleet[f.Name] = f.N == 3*12*60 && f.Median > 0
		}
	}
	if !skipped {
		t.Errorf("recovery not reported as skipped: %+v", r.Figures)
	}
	for name, ok := range fleet {
		if !ok {
			t.Errorf("no row %q of 3×12×60 steps: %+v", name, r.Figures)
		}
	}
	t.Logf("durable step / floor = %.2f; 3 hosts / 1 host = %.2f", r.StepRatio, r.FleetThroughput)
	if _, errOut, code := taskhost(t, "bench", "--store", "postgres", "--dsn-env", "TASKHOST_IT_UNSET_DSN"); code != 2 || !strings.Contains(errOut, "TASKHOST_IT_UNSET_DSN") {
		t.Errorf("bench with the DSN variable unset: exit %d, want 2 naming it\n%s", code, errOut)
	}
}
