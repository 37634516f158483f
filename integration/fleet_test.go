package integration

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
)

// The fleet tests run real `taskhost serve` daemons, each with its own data
// dir, on one PostgreSQL database (testpg: skipped, with the reason, where
// there is no server). The hosts share one host key, as docs/operations.md
// asks, so a checkpoint sealed on one verifies on another.

// dsnEnv puts dsn in an environment variable of the test's own, for the
// daemons it starts to read ([store] dsn_env), and returns the variable's
// name. Not t.Setenv: that keeps a test from running in parallel, while a
// name per test and database lets each test's daemons inherit every
// variable and read only their own.
func dsnEnv(t *testing.T, dsn string) string {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(t.Name() + "\x00" + dsn))
	name := fmt.Sprintf("TASKHOST_TEST_DSN_%016x", h.Sum64())
	if err := os.Setenv(name, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv(name) })
	return name
}

// fleetTimings make a lost host noticed within seconds.
const fleetTimings = "heartbeat_seconds = 1\nlease_seconds = 3\npoll_millis = 50\n"

// startFleet starts one daemon per id on a fresh database, each with extra
// appended to its config; work is the directory the test executor may
// write (pid files, markers).
func startFleet(t *testing.T, extra string, ids ...string) (work string, hosts []*daemon) {
	t.Helper()
	return startFleetOn(t, testpg.DSN(t), extra, ids...)
}

// startFleetOn is startFleet on the database dsn names.
func startFleetOn(t *testing.T, dsn, extra string, ids ...string) (work string, hosts []*daemon) {
	t.Helper()
	env := dsnEnv(t, dsn)
	work = testwait.ShortTempDir(t)
	key := make([]byte, 32)
	rand.Read(key) //nolint:errcheck // never fails
	for _, id := range ids {
		data, conf := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
		if err := os.WriteFile(filepath.Join(data, "host.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := writeConfig(t, conf, fmt.Sprintf("[executors.testexec]\npath = %q\nread_write = [%q]\n\n"+
			"[store]\ndriver = \"postgres\"\ndsn_env = %q\n\n[fleet]\nhost_id = %q\n%s\n%s",
			filepath.Join(binDir, "taskhost-executor-testexec"), work, env, id, fleetTimings, extra))
		d := startDaemon(t, data, cfg)
		t.Cleanup(func() {
			select {
			case <-d.exited:
			default:
				d.stop(t)
			}
		})
		hosts = append(hosts, d)
	}
	return work, hosts
}

func status(t *testing.T, d *daemon, id string) statusJSON {
	t.Helper()
	var st statusJSON
	d.cliJSON(t, &st, "task", "status", id)
	return st
}

// Create on A, cancel through B: the cancel commits on B and reaches the
// executor's context on A through the store.
func TestFleetCancelAcrossHosts(t *testing.T) {
	t.Parallel()
	work, hs := startFleet(t, "", "host-a", "host-b")
	a, b := hs[0], hs[1]
	marker := filepath.Join(work, "cancelled")
	id := createTask(t, a, work, map[string]any{"goal": "sleep", "testexec": map[string]any{"sleep_ms": 60000, "cancel_marker": marker}})
	testwait.Until(t, 20*time.Second, "the step to run on A", func() bool {
		st := status(t, b, id)
		return len(st.Attempts) == 1 && st.Attempts[0].Status == "running"
	})
	var v oneTask
	t0 := time.Now()
	b.cliJSON(t, &v, "task", "cancel", id)
	if v.Task.Status != "cancelled" || v.Task.Reason != "user_cancelled" {
		t.Fatalf("cancel on B: %+v", v.Task)
	}
	testwait.Until(t, 10*time.Second, "the executor on A to see its context cancelled", func() bool {
		data, err := os.ReadFile(marker)
		return err == nil && strings.Contains(string(data), "cancelled attempt=1")
	})
	t.Logf("cancel through B reached the executor on A within %s (poll 50 ms)", time.Since(t0))
	testwait.Until(t, 10*time.Second, "A to close the attempt", func() bool {
		st := status(t, a, id)
		return st.Attempts[0].Status == "cancelled"
	})
}

// SIGKILL A mid-step: B marks the task host_lost within the lease bound, a
// resume on B completes it with what is left of the budgets.
func TestFleetHostKilledResumedElsewhere(t *testing.T) {
	t.Parallel()
	work, hs := startFleet(t, "", "host-a", "host-b")
	a, b := hs[0], hs[1]
	pidFile := filepath.Join(work, "pid")
	id := createTask(t, a, work, map[string]any{"goal": "survive a host", "testexec": map[string]any{
		"steps": 3, "pid_file": pidFile, "sleep_at_attempt": 2, "long_sleep_ms": 60000,
	}}, "--max-steps", "5")
	testwait.Until(t, 20*time.Second, "attempt 2 to run on A", func() bool {
		st := status(t, b, id)
		return len(st.Attempts) == 2 && st.Attempts[1].Status == "running"
	})
	plugin := readPid(t, pidFile)
	a.kill(t)
	killed := time.Now()
	testwait.Until(t, 5*time.Second, "A's plugin to die with it", func() bool { return !alive(plugin) })
	testwait.Until(t, 15*time.Second, "B to mark the task host_lost", func() bool {
		return status(t, b, id).Task.Status == "interrupted"
	})
	t.Logf("host_lost %s after A's SIGKILL (lease 3 s, heartbeat 1 s)", time.Since(killed))
	lost := status(t, b, id)
	if lost.Task.Reason != "host_lost" || lost.Attempts[1].Status != "interrupted" || lost.Attempts[1].Reason != "host_lost" {
		t.Fatalf("after the takeover: %+v %+v", lost.Task, lost.Attempts)
	}
	var v oneTask
	b.cliJSON(t, &v, "task", "resume", id)
	testwait.Until(t, 20*time.Second, "the resumed task to complete on B", func() bool {
		return status(t, b, id).Task.Status == "completed"
	})
	done := status(t, b, id)
	steps := done.Task.Budgets["steps"]
	if done.Task.RunID != 2 || string(done.Task.Result) != `{"steps":3}` || steps.Used != 4 || steps.Limit != 5 {
		t.Fatalf("after the resume on B: run %d result %s steps %d/%d; want run 2, {\"steps\":3}, 4/5",
			done.Task.RunID, done.Task.Result, steps.Used, steps.Limit)
	}
}

// SIGSTOP A past its lease, take the task over on B and finish it there,
// then SIGCONT A: A's late run is fenced off — it stops its plugin, logs
// the lost lease, and nothing of the task changes.
func TestFleetPausedHostFenced(t *testing.T) {
	t.Parallel()
	work, hs := startFleet(t, "", "host-a", "host-b")
	a, b := hs[0], hs[1]
	pidFile := filepath.Join(work, "pid")
	id := createTask(t, a, work, map[string]any{"goal": "outlive a pause", "testexec": map[string]any{
		"steps": 2, "pid_file": pidFile, "sleep_at_attempt": 1, "long_sleep_ms": 3000,
	}}, "--max-steps", "5")
	testwait.Until(t, 20*time.Second, "attempt 1 to run on A", func() bool {
		st := status(t, b, id)
		return len(st.Attempts) == 1 && st.Attempts[0].Status == "running"
	})
	plugin := readPid(t, pidFile)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			a.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // best effort for the clean-up
		}
	}()
	testwait.Until(t, 15*time.Second, "B to mark the paused host's task host_lost", func() bool {
		return status(t, b, id).Task.Status == "interrupted"
	})
	var v oneTask
	b.cliJSON(t, &v, "task", "resume", id)
	testwait.Until(t, 20*time.Second, "the task to complete on B", func() bool {
		return status(t, b, id).Task.Status == "completed"
	})
	before := status(t, b, id)
	// A's plugin finished its 3 s step while A was stopped: its answer is
	// waiting for A.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	testwait.Until(t, 15*time.Second, "A to report its lost lease", func() bool {
		return strings.Contains(a.logText(), "lease") && strings.Contains(a.logText(), id)
	})
	testwait.Until(t, 10*time.Second, "A's plugin to be stopped", func() bool { return !alive(plugin) })
	after := status(t, b, id)
	if after.Task.Status != "completed" || after.Task.RunID != 2 || string(after.Task.Result) != string(before.Task.Result) ||
		len(after.Attempts) != len(before.Attempts) || after.Task.Budgets["steps"] != before.Task.Budgets["steps"] {
		t.Fatalf("A's late run changed the task:\nbefore %+v\nafter  %+v", before, after)
	}
	if after.Attempts[0].Status != "interrupted" || after.Attempts[0].Reason != "host_lost" {
		t.Fatalf("A's attempt: %+v, want interrupted (host_lost)", after.Attempts[0])
	}
	for _, att := range after.Attempts[1:] {
		if att.RunID != 2 {
			t.Fatalf("attempt %d is of run %d: after the takeover only B's run 2 may write", att.Attempt, att.RunID)
		}
	}
}

// Principals are the same on every host (the same config): a task is
// visible to its principal through any host and to nobody else through any.
func TestFleetPrincipalIsolation(t *testing.T) {
	t.Parallel()
	const ciTok, bobTok = "fleet-ci-token-0123456789-not-a-secret", "fleet-bob-token-0123456789-not-a-secret"
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	work, hs := startFleet(t, fmt.Sprintf("[api]\ntcp_listen = \"127.0.0.1:0\"\n\n[api.tokens]\nci = %q\nbob = %q\n",
		hash(ciTok), hash(bobTok)), "host-a", "host-b")
	a, b := hs[0], hs[1]
	as := func(d *daemon, tok string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "taskhost"), append(args, "--address", d.tcp)...)
		cmd.Env = []string{"HOME=/tmp", "TASKHOST_TOKEN=" + tok}
		return runCmd(t, cmd)
	}
	// root's task, created on A through the socket.
	rootTask := createTask(t, a, work, map[string]any{"goal": "root's", "testexec": map[string]any{"steps": 1}})
	// ci's task, created on B through the token listener.
	spec := writeSpec(t, work, map[string]any{"goal": "ci's", "testexec": map[string]any{"steps": 1}})
	out, errOut, code := as(b, ciTok, "task", "create", "--executor", "testexec", "--spec-file", spec, "--json")
	if code != 0 {
		t.Fatalf("ci creates on B: exit %d %s%s", code, out, errOut)
	}
	ciTask := out[strings.Index(out, `"t_`)+1:]
	ciTask = ciTask[:strings.IndexByte(ciTask, '"')]
	// Each principal sees its own task through either host.
	for _, d := range []*daemon{a, b} {
		if _, errOut, code := d.cli(t, "task", "status", rootTask); code != 0 {
			t.Fatalf("root's own task through %s: exit %d %s", d.dataDir, code, errOut)
		}
		if _, errOut, code := as(d, ciTok, "task", "status", ciTask); code != 0 {
			t.Fatalf("ci's own task through %s: exit %d %s", d.dataDir, code, errOut)
		}
	}
	// Nobody else does, through any host: not found, as for a missing task.
	for _, d := range []*daemon{a, b} {
		for _, c := range []struct {
			who string
			run func(args ...string) (string, string, int)
			id  string
		}{
			{"bob", func(args ...string) (string, string, int) { return as(d, bobTok, args...) }, rootTask},
			{"bob", func(args ...string) (string, string, int) { return as(d, bobTok, args...) }, ciTask},
			{"root", func(args ...string) (string, string, int) { return d.cli(t, args...) }, ciTask},
			{"ci", func(args ...string) (string, string, int) { return as(d, ciTok, args...) }, rootTask},
		} {
			for _, verb := range []string{"status", "cancel"} {
				if _, errOut, code := c.run("task", verb, c.id); code != 3 || !strings.Contains(errOut, "not found") {
					t.Fatalf("%s: task %s of another principal through %s: exit %d %s, want 3 (not found)", c.who, verb, d.dataDir, code, errOut)
				}
			}
		}
	}
}
