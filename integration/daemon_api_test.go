package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// Through the real socket: create → watch → completed, with the documented
// JSON shapes all the way.
func TestDaemonCreateWatchComplete(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, "")
	id := createTask(t, d, work, map[string]any{"goal": "count to three", "testexec": map[string]any{"steps": 3, "sleep_ms": 20}}, "--max-steps", "5")

	w := startWatch(t, d, id)
	if first := w.next(t); first.Kind != "task" || first.Task.ID != id {
		t.Fatalf("first watch line: %+v", first)
	}
	final, code := w.result(t)
	if code != 0 || final.Status != "completed" || final.Budgets["steps"] != (meterJSON{Used: 3, Limit: 5}) {
		t.Fatalf("watch ended with exit %d, task %+v", code, final)
	}
	var types []string
	for _, l := range w.lines {
		if l.Kind == "event" {
			types = append(types, l.Type)
		}
	}
	got := strings.Join(types, ",")
	if !strings.HasPrefix(got, "task.created,task.started,step.started") || !strings.HasSuffix(got, "step.completed,task.completed") ||
		strings.Count(got, "step.completed") != 3 {
		t.Fatalf("events: %s", got)
	}

	var st statusJSON
	d.cliJSON(t, &st, "task", "status", id)
	if st.Task.Status != "completed" || len(st.Attempts) != 3 || string(st.Task.Result) != `{"steps":3}` {
		t.Fatalf("status: %+v", st)
	}
	var list listJSON
	d.cliJSON(t, &list, "task", "list", "--status", "completed")
	if len(list.Tasks) != 1 || list.Tasks[0].ID != id || list.Shown != 1 || list.Total != 1 || list.Sort != "-created" {
		t.Fatalf("list: %+v", list)
	}
	// Watching a finished task replays it and ends at once.
	w2 := startWatch(t, d, id)
	if final, code := w2.result(t); code != 0 || final.Status != "completed" {
		t.Fatalf("late watch: exit %d %+v", code, final)
	}
	// The text view shows meters and the attempt log.
	out, _, code := d.cli(t, "task", "status", id)
	if code != 0 || !strings.Contains(out, "steps 3/5") || !strings.Contains(out, "ATTEMPT") {
		t.Fatalf("task status:\n%s", out)
	}
}

// Cancel through the API: the step in flight stops, the watch reports the
// cancel (exit 1), cancelling again is a no-op, and resuming is a conflict.
func TestDaemonCancel(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, testexecConfig(t, work))
	marker := filepath.Join(work, "cancelled")
	id := createTask(t, d, work, map[string]any{"goal": "sleep", "testexec": map[string]any{"sleep_ms": 60000, "cancel_marker": marker}})
	w := startWatch(t, d, id)
	w.until(t, event("step.started", 1))

	var v oneTask
	d.cliJSON(t, &v, "task", "cancel", id)
	if v.Task.Status != "cancelled" || v.Task.Reason != "user_cancelled" {
		t.Fatalf("cancel: %+v", v.Task)
	}
	final, code := w.result(t)
	if code != 1 || final.Status != "cancelled" {
		t.Fatalf("watch: exit %d %+v", code, final)
	}
	if data, err := os.ReadFile(marker); err != nil || !strings.Contains(string(data), "cancelled attempt=1") {
		t.Fatalf("the step was not cancelled through its context: %q %v", data, err)
	}
	d.cliJSON(t, &v, "task", "cancel", id) // idempotent
	if _, errOut, code := d.cli(t, "task", "resume", id); code != 4 || !strings.Contains(errOut, "cancelled") {
		t.Fatalf("resume of a cancelled task: exit %d %s", code, errOut)
	}
	if _, errOut, code := d.cli(t, "task", "cancel", "t_doesnotexist"); code != 3 || !strings.Contains(errOut, "not found") {
		t.Fatalf("cancel of a missing task: exit %d %s", code, errOut)
	}
}

// The daemon SIGKILLed mid-step: the watch loses it and keeps
// reconnecting; a restarted daemon recovers the task as interrupted
// (host_restart), which the same watch reports; resume completes it.
func TestDaemonKilledWatchReconnectsThenResume(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	pidFile := filepath.Join(work, "pid")
	d := startDaemon(t, data, testexecConfig(t, work))
	id := createTask(t, d, work, map[string]any{"goal": "survive", "testexec": map[string]any{
		"steps": 2, "pid_file": pidFile, "sleep_at_attempt": 2, "long_sleep_ms": 60000,
	}}, "--max-steps", "6")
	w := startWatch(t, d, id)
	w.until(t, event("step.started", 2))
	plugin := readPid(t, pidFile)

	d.kill(t)
	testwait.Until(t, 5*time.Second, "the plugin to die with its daemon", func() bool { return !alive(plugin) })
	// The watch is still running, reconnecting.
	if !alive(w.cmd.Process.Pid) {
		t.Fatal("task watch exited when the daemon died")
	}
	d2 := startDaemon(t, data, testexecConfig(t, work))
	l := w.until(t, func(l watchLine) bool { return l.Kind == "event" && l.Type == "task.interrupted" })
	if !strings.Contains(string(l.Payload), "host_restart") {
		t.Fatalf("interrupted event: %s", l.Payload)
	}
	final, code := w.result(t)
	if code != 6 || final.Status != "interrupted" || final.Reason != "host_restart" {
		t.Fatalf("watch: exit %d %+v", code, final)
	}
	if !strings.Contains(w.stderr.String(), "reconnected") {
		t.Errorf("the watch did not say it reconnected:\n%s", w.stderr.String())
	}

	out, errOut, code := d2.cli(t, "task", "resume", id, "--watch", "--json")
	if code != 0 || !strings.Contains(out, `"kind":"result"`) {
		t.Fatalf("resume --watch: exit %d\n%s%s", code, out, errOut)
	}
	var st statusJSON
	d2.cliJSON(t, &st, "task", "status", id)
	if st.Task.Status != "completed" || st.Task.RunID != 2 || len(st.Attempts) != 3 ||
		st.Attempts[1].Status != "interrupted" || st.Attempts[1].Reason != "host_restart" {
		t.Fatalf("after resume: %+v", st)
	}
	if s := st.Task.Budgets["steps"]; s != (meterJSON{Used: 3, Limit: 6}) {
		t.Errorf("steps %+v: the killed attempt costs a step, the limit stays", s)
	}
}

// SIGTERM stops the daemon gracefully: the running task becomes interrupted
// (host_shutdown) and its watcher is told, the plugin is gone, the socket
// removed, exit 0.
func TestDaemonGracefulStop(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	pidFile := filepath.Join(work, "pid")
	d := startDaemon(t, data, testexecConfig(t, work))
	id := createTask(t, d, work, map[string]any{"goal": "sleep", "testexec": map[string]any{"sleep_ms": 60000, "pid_file": pidFile}})
	w := startWatch(t, d, id)
	w.until(t, event("step.started", 1))
	plugin := readPid(t, pidFile)

	if code := d.stop(t); code != 0 {
		t.Fatalf("daemon exit %d after SIGTERM", code)
	}
	final, code := w.result(t)
	if code != 6 || final.Status != "interrupted" || final.Reason != "host_shutdown" {
		t.Fatalf("watch: exit %d %+v", code, final)
	}
	if alive(plugin) {
		t.Error("the plugin outlived the daemon's graceful stop")
	}
	if _, err := os.Lstat(filepath.Join(data, "taskhost.sock")); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	if got := inspect(t, data, id); got.Task.Status != "interrupted" || got.Task.Reason != "host_shutdown" {
		t.Errorf("store after stop: %+v", got.Task)
	}
}

// One daemon per data dir: a second is refused with a message naming the
// first, and the first keeps serving.
func TestSecondDaemonRefused(t *testing.T) {
	t.Parallel()
	data := testwait.ShortTempDir(t)
	d := startDaemon(t, data, "")
	_, errOut, code := taskhost(t, "serve", "--data-dir", data)
	if code != 5 || !strings.Contains(errOut, "used by another taskhost (pid "+strconv.Itoa(d.cmd.Process.Pid)+")") ||
		!strings.Contains(errOut, "second daemon") {
		t.Fatalf("second daemon: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := d.cli(t, "executors"); code != 0 {
		t.Fatalf("the first daemon stopped serving: %s", errOut)
	}
	// `run` on the served data dir is refused the same way and says what
	// to do instead; on its own data dir it runs beside the daemon.
	_, errOut, code = taskhost(t, "run", "--data-dir", data, "--executor", "testexec", "--goal", "x")
	if code != 5 || !strings.Contains(errOut, "task create") {
		t.Fatalf("run on the daemon's data dir: exit %d\n%s", code, errOut)
	}
	out, errOut, code := taskhost(t, "run", "--data-dir", testwait.ShortTempDir(t), "--executor", "testexec", "--goal", "beside the daemon")
	if code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("run beside the daemon: exit %d\n%s%s", code, out, errOut)
	}
}

// The data dir is 0700 and the socket 0600 by default, whatever the data
// dir's mode was.
func TestSocketPermissions(t *testing.T) {
	t.Parallel()
	data := testwait.ShortTempDir(t)
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, data, "")
	for path, want := range map[string]os.FileMode{data: 0o700, d.socket: 0o600} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
			t.Errorf("%s: owner %d", path, st.Uid)
		}
	}
	if d.socket != filepath.Join(data, "taskhost.sock") {
		t.Errorf("socket at %s", d.socket)
	}
}

// A config error names the key and exits 2; a non-loopback token listener
// is one.
func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	cfg := writeConfig(t, dir, "[api]\ntcp_listen = \"0.0.0.0:7468\"\n")
	_, errOut, code := taskhost(t, "serve", "--data-dir", filepath.Join(dir, "data"), "--config", cfg)
	if code != 2 || !strings.Contains(errOut, "api.tcp_listen") || !strings.Contains(errOut, "loopback") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
}

// The event stream of `task watch` without --json is one line per event.
func TestWatchTextOutput(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, "")
	id := createTask(t, d, work, map[string]any{"goal": "two", "testexec": map[string]any{"steps": 2}})
	out, errOut, code := d.cli(t, "task", "watch", id)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"task " + id, "step.completed", "task.completed", "task " + id + " completed: steps 2/20"} {
		if !strings.Contains(out, want) {
			t.Errorf("watch output lacks %q:\n%s", want, out)
		}
	}
	var errv struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
		ExitCode int `json:"exit_code"`
	}
	_, errOut, code = d.cli(t, "task", "watch", "t_nope", "--json")
	if code != 3 || json.Unmarshal([]byte(errOut), &errv) != nil || errv.Error.Code != "not_found" {
		t.Fatalf("watch of a missing task: exit %d %s", code, errOut)
	}
}
