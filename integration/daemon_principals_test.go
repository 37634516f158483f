package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

const (
	aliceUID   = 12345 // a second peer-credential principal
	strangerID = 23456 // in alice's group, so it reaches the socket, but no principal
	ciToken    = "ci-token-0123456789abcdef-not-a-real-secret"
)

// actor is one way of calling the daemon: a uid on the socket, or a token
// on the TCP listener.
type actor struct {
	name  string // the principal it should be
	run   func(t *testing.T, args ...string) (stdout, stderr string, code int)
	token bool
}

// isolation is a daemon with three principals: root and alice through the
// socket's peer credentials, ci through a bearer token.
type isolation struct {
	d        *daemon
	work     string
	root     actor
	alice    actor
	ci       actor
	stranger actor
	badToken actor
}

func setUpIsolation(t *testing.T) *isolation {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: the test runs clients as other uids")
	}
	parent := testwait.ShortTempDir(t)
	clientDir := testwait.ShortTempDir(t)
	work := testwait.ShortTempDir(t)
	for _, dir := range []string{parent, clientDir, work} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A copy of the client other uids can run (binDir is private).
	bin, err := os.ReadFile(filepath.Join(binDir, "taskhost"))
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(clientDir, "taskhost")
	if err := os.WriteFile(client, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(ciToken))
	cfg := writeConfig(t, work, fmt.Sprintf(`
[tasks]
max_concurrent = 4

[principals]
"0" = "root"
"%d" = "alice"

[api]
socket_group = "%d"
tcp_listen = "127.0.0.1:0"

[api.tokens]
ci = "%s"
`, aliceUID, aliceUID, hex.EncodeToString(sum[:])))
	data := filepath.Join(parent, "data")
	d := startDaemon(t, data, cfg)
	if d.tcp == "" {
		t.Fatal("no token listener")
	}
	runAs := func(uid int) func(t *testing.T, args ...string) (string, string, int) {
		return func(t *testing.T, args ...string) (string, string, int) {
			t.Helper()
			cmd := exec.Command(client, append(args, "--socket", d.socket)...)
			cmd.Env = []string{"HOME=/tmp", "PATH=/usr/bin:/bin"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: aliceUID}}
			return runCmd(t, cmd)
		}
	}
	withToken := func(tok string) func(t *testing.T, args ...string) (string, string, int) {
		return func(t *testing.T, args ...string) (string, string, int) {
			t.Helper()
			cmd := exec.Command(filepath.Join(binDir, "taskhost"), append(args, "--address", d.tcp)...)
			cmd.Env = []string{"HOME=/tmp", "TASKHOST_TOKEN=" + tok}
			return runCmd(t, cmd)
		}
	}
	return &isolation{
		d: d, work: work,
		root:     actor{name: "root", run: func(t *testing.T, args ...string) (string, string, int) { return d.cli(t, args...) }},
		alice:    actor{name: "alice", run: runAs(aliceUID)},
		ci:       actor{name: "ci", run: withToken(ciToken), token: true},
		stranger: actor{name: "", run: runAs(strangerID)},
		badToken: actor{name: "", run: withToken(ciToken + "x"), token: true},
	}
}

func runCmd(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	_ = cmd.Wait()
	if cmd.ProcessState.ExitCode() < 0 {
		t.Fatalf("%v: %v\n%s", cmd.Args, cmd.ProcessState, e.String())
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func (a actor) json(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := a.run(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%s: taskhost %v: exit %d\n%s%s", a.name, args, code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s: taskhost %v: %v\n%s", a.name, args, err, out)
	}
}

// Principal isolation over the API: three principals, two through peer
// credentials and one through a token, run tasks at the same time and each
// sees and touches only its own tasks and approvals. A task of another
// principal answers exactly like a missing one.
func TestPrincipalIsolation(t *testing.T) {
	t.Parallel()
	is := setUpIsolation(t)
	spec := writeSpec(t, is.work, map[string]any{"goal": "ask first", "testexec": map[string]any{"request_approval": true}})
	if err := os.Chmod(spec, 0o644); err != nil {
		t.Fatal(err)
	}
	actors := []actor{is.root, is.alice, is.ci}
	task := map[string]string{}
	approval := map[string]string{}
	for _, a := range actors {
		var v oneTask
		a.json(t, &v, "task", "create", "--executor", "testexec", "--spec-file", spec)
		if v.Task.Principal != a.name {
			t.Fatalf("%s created a task of principal %q", a.name, v.Task.Principal)
		}
		task[a.name] = v.Task.ID
	}
	// All three wait for an approval at once.
	for _, a := range actors {
		var list approvalsJSON
		testwait.Until(t, 15*time.Second, a.name+"'s approval", func() bool {
			a.json(t, &list, "approvals", "list")
			return len(list.Approvals) > 0
		})
		if len(list.Approvals) != 1 || list.Approvals[0].TaskID != task[a.name] {
			t.Fatalf("%s sees approvals %+v", a.name, list.Approvals)
		}
		approval[a.name] = list.Approvals[0].ID
		var tasks listJSON
		a.json(t, &tasks, "task", "list")
		if len(tasks.Tasks) != 1 || tasks.Tasks[0].ID != task[a.name] || tasks.Tasks[0].Status != "waiting_approval" {
			t.Fatalf("%s lists %+v", a.name, tasks.Tasks)
		}
	}

	// Every cross access is "not found", word for word like a missing id.
	const missingTask, missingApproval = "t_aaaaaaaaaaaaaaaaaaaaaaaaaa", "a_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	for _, a := range actors {
		for _, victim := range actors {
			if a.name == victim.name {
				continue
			}
			for _, args := range [][]string{
				{"task", "status", task[victim.name]}, {"task", "cancel", task[victim.name]},
				{"task", "resume", task[victim.name]}, {"task", "watch", task[victim.name]},
				{"approve", approval[victim.name]}, {"reject", approval[victim.name]},
			} {
				_, errForeign, code := a.run(t, args...)
				missing := append([]string{}, args...)
				id, stand := task[victim.name], missingTask
				if strings.HasPrefix(args[len(args)-1], "a_") {
					id, stand = approval[victim.name], missingApproval
				}
				missing[len(missing)-1] = stand
				_, errMissing, codeMissing := a.run(t, missing...)
				if code != 3 || codeMissing != 3 || strings.ReplaceAll(errForeign, id, "ID") != strings.ReplaceAll(errMissing, stand, "ID") {
					t.Errorf("%s %v on %s's: exit %d %q; on a missing one: exit %d %q", a.name, args, victim.name, code, errForeign, codeMissing, errMissing)
				}
			}
		}
	}

	// Each approves its own; each task completes; nothing of another's
	// changed.
	for _, a := range actors {
		if out, errOut, code := a.run(t, "approve", approval[a.name]); code != 0 {
			t.Fatalf("%s approve: exit %d %s%s", a.name, code, out, errOut)
		}
	}
	for _, a := range actors {
		out, errOut, code := a.run(t, "task", "watch", task[a.name])
		if code != 0 || !strings.Contains(out, "completed") {
			t.Fatalf("%s watch: exit %d\n%s%s", a.name, code, out, errOut)
		}
		var st statusJSON
		a.json(t, &st, "task", "status", task[a.name])
		if st.Task.Principal != a.name || st.Task.Status != "completed" {
			t.Fatalf("%s: %+v", a.name, st.Task)
		}
	}
}

// A uid without a principal reaches the socket (through the group) and is
// refused; a bad token is refused without saying whether a task exists.
func TestUnknownCallersRefused(t *testing.T) {
	t.Parallel()
	is := setUpIsolation(t)
	var v oneTask
	spec := writeSpec(t, is.work, map[string]any{"goal": "x", "testexec": map[string]any{"steps": 1}})
	is.root.json(t, &v, "task", "create", "--executor", "testexec", "--spec-file", spec)

	_, errOut, code := is.stranger.run(t, "task", "list")
	if code != 7 || !strings.Contains(errOut, fmt.Sprintf("uid %d is not a taskhost principal", strangerID)) || !strings.Contains(errOut, "[principals]") {
		t.Fatalf("unknown uid: exit %d %s", code, errOut)
	}
	_, errExists, code1 := is.badToken.run(t, "task", "status", v.Task.ID)
	_, errMissing, code2 := is.badToken.run(t, "task", "status", "t_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	if code1 != 7 || code2 != 7 || errExists != errMissing || strings.Contains(errExists, "not found") {
		t.Fatalf("bad token: exit %d %q vs exit %d %q", code1, errExists, code2, errMissing)
	}
	_, errOut, code = is.badToken.run(t, "task", "list", "--json")
	var e struct {
		Error struct {
			Code, Reason string
		} `json:"error"`
	}
	if code != 7 || json.Unmarshal([]byte(errOut), &e) != nil || e.Error.Code != "unauthenticated" || e.Error.Reason != "BAD_TOKEN" {
		t.Fatalf("bad token --json: exit %d %s", code, errOut)
	}
	if !strings.Contains(is.d.logText(), `"api call refused"`) {
		t.Error("refused calls are not logged")
	}

	// The group reaches the socket and nothing else in the data dir.
	for path, want := range map[string]os.FileMode{is.d.dataDir: 0o710, is.d.socket: 0o660, filepath.Join(is.d.dataDir, "taskhost.db"): 0o600, filepath.Join(is.d.dataDir, "host.key"): 0o600} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
		}
	}
	if st := mustStat(t, is.d.socket); st.Gid != aliceUID {
		t.Errorf("socket group %d, want %d", st.Gid, aliceUID)
	}
	// A uid in the group still cannot read the store.
	cmd := exec.CommandContext(context.Background(), "/bin/cat", filepath.Join(is.d.dataDir, "taskhost.db"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: strangerID, Gid: aliceUID}}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Run(); err == nil {
		t.Error("a member of socket_group read the store")
	}
}

func mustStat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}
