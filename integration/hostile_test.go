package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testwait"
)

// A hostile executor built only with the SDK runs next to a normal task on a
// real daemon. Inside its step it tries to read the store, its WAL and the
// host key, to read and plant a file in the other task's workspace, to read
// the daemon's environment and memory, to signal the daemon, to open a TCP
// socket and to run a shell. Every probe is refused, nothing is planted, the
// other task completes unaffected and its store rows are intact.
//
// Serial: t.Setenv (the canary in the daemon's environment).
func TestHostileExecutorIsConfined(t *testing.T) {
	if confine.Probe().LandlockABI < 1 {
		t.Skip("the kernel offers no Landlock: the filesystem probes would not be refused")
	}
	dir := testwait.ShortTempDir(t)
	data := filepath.Join(dir, "d")
	const canary = "hostile-canary-6b1d0c"
	t.Setenv("TASKHOST_TEST_CANARY", canary)
	d := startDaemon(t, data, writeConfig(t, dir, "[tasks]\nmax_concurrent = 4\n"))

	victimFile := filepath.Join(dir, "victim.txt")
	if err := os.WriteFile(victimFile, []byte("the victim's own data"), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := createTask(t, d, dir, map[string]any{"goal": "victim", "testexec": map[string]any{"steps": 4, "sleep_ms": 250}}, "--file", victimFile)
	vw := startWatch(t, d, victim)

	// A root daemon's socket that trusts its peer's uid, as docker's and
	// systemd's do: the plugin runs as uid 0 (without capabilities).
	rootSock := filepath.Join(dir, "rootd.sock")
	l, err := net.Listen("unix", rootSock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	hostileSpec := filepath.Join(dir, "hostile.json")
	if err := os.WriteFile(hostileSpec, []byte(`{"goal": "probe", "hostileexec": {"victim": "`+victim+`", "socket": "`+rootSock+`", "data_dir": "`+data+`"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var created oneTask
	d.cliJSON(t, &created, "task", "create", "--executor", "hostileexec", "--spec-file", hostileSpec)
	hostile, code := startWatch(t, d, created.Task.ID).result(t)
	if code != 0 || hostile.Status != "completed" {
		t.Fatalf("hostile task %s (%s: %s), exit %d", hostile.Status, hostile.Reason, hostile.Message, code)
	}
	var res struct {
		Probes map[string]string `json:"probes"`
	}
	if err := json.Unmarshal(hostile.Result, &res); err != nil {
		t.Fatalf("hostile result %s: %v", hostile.Result, err)
	}
	for _, name := range []string{
		"read_store", "read_wal", "read_host_key", "list_data_dir",
		"list_victim_workspace", "read_victim_file", "plant_in_victim_workspace",
		"read_daemon_environ", "open_daemon_memory", "signal_daemon",
		"fork_exec_shell", "exec_shell", "inet_socket", "call_daemon_api", "connect_root_socket",
	} {
		got, ok := res.Probes[name]
		switch {
		case !ok:
			t.Errorf("probe %s did not report", name)
		case !strings.HasPrefix(got, "refused: "):
			t.Errorf("probe %s: %s", name, got)
		default:
			t.Logf("%-26s %s", name, got)
		}
		if strings.Contains(got, canary) || strings.Contains(got, "victim's own data") {
			t.Errorf("probe %s leaked a secret: %s", name, got)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the root daemon's socket accepted %d connections", n)
	}
	// The probes aimed at the real data dir (a plugin under a uid of its
	// own cannot guess it from its working dir, but may know it).
	if g := res.Probes["data_dir_guess"]; g != "allowed: "+data {
		t.Errorf("data dir guess %q, want %q", g, data)
	}

	vt, vcode := vw.result(t)
	if vcode != 0 || vt.Status != "completed" {
		t.Fatalf("victim task %s (%s), exit %d", vt.Status, vt.Reason, vcode)
	}
	ws := filepath.Join(data, "workspaces", victim)
	if _, err := os.Stat(filepath.Join(ws, "planted.txt")); !os.IsNotExist(err) {
		t.Errorf("a file was planted in the victim's workspace: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "victim.txt")); err != nil || string(b) != "the victim's own data" {
		t.Errorf("victim's file: %q, %v", b, err)
	}
	in := inspect(t, data, victim)
	if in.Task.Status != "completed" || in.Task.RunID != 1 || len(in.Attempts) != 4 {
		t.Errorf("victim's store rows: %+v", in)
	}
	var results map[string]any
	if err := json.Unmarshal(vt.Result, &results); err != nil || results["steps"] != float64(4) {
		t.Errorf("victim's result %s", vt.Result)
	}
	// The hostile plugin's private dir went with it.
	testwait.Until(t, 10*time.Second, "the plugin private dirs removed", func() bool {
		left, _ := filepath.Glob(filepath.Join(data, "plugins", "run-*"))
		return len(left) == 0
	})
}
