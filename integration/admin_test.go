package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
)

// An admin ([api] admins) on a real daemon: after a daemon stop leaves
// alice's task interrupted, root lists every principal's tasks and
// resumes alice's task; the resume is recorded in its events with root's
// name. Alice, not an admin, still gets "not found" for root's task and
// is refused --all.
func TestAdminResumesAnotherPrincipalsTask(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root: the test runs a client as another uid")
	}
	parent, clientDir, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	for _, dir := range []string{parent, clientDir, work} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := os.ReadFile(filepath.Join(binDir, "taskhost"))
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(clientDir, "taskhost")
	if err := os.WriteFile(client, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, work, fmt.Sprintf(`
[principals]
"0" = "root"
"%d" = "alice"

[api]
socket_group = "%d"
admins = ["root"]
`, aliceUID, aliceUID))
	data := filepath.Join(parent, "data")
	d := startDaemon(t, data, cfg)
	alice := func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(client, append(args, "--socket", d.socket)...)
		cmd.Env = []string{"HOME=/tmp", "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: aliceUID, Gid: aliceUID}}
		return runCmd(t, cmd)
	}
	spec := writeSpec(t, work, map[string]any{"goal": "long", "testexec": map[string]any{"steps": 2, "sleep_ms": 120000}})
	if err := os.Chmod(spec, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := alice(t, "task", "create", "--executor", "testexec", "--spec-file", spec)
	if code != 0 {
		t.Fatalf("alice creates: exit %d %s", code, errOut)
	}
	alicesTask := strings.TrimSpace(out)
	rootsTask := createTask(t, d, work, map[string]any{"goal": "g", "testexec": map[string]any{"steps": 1}})
	if code := d.stop(t); code != 0 {
		t.Fatalf("daemon stop: exit %d", code)
	}
	d = startDaemon(t, data, cfg)

	var all listJSON
	d.cliJSON(t, &all, "task", "list", "--all")
	owners := map[string]string{}
	for _, task := range all.Tasks {
		owners[task.ID] = task.Principal + " " + task.Status
	}
	if owners[alicesTask] != "alice interrupted" || !strings.HasPrefix(owners[rootsTask], "root ") {
		t.Fatalf("root's task list --all: %v", owners)
	}
	if out, _, code := d.cli(t, "task", "list", "--all"); code != 0 || !strings.Contains(out, "PRINCIPAL") || !strings.Contains(out, "alice") {
		t.Fatalf("task list --all text: exit %d\n%s", code, out)
	}

	// Alice is not an admin: nothing changes for her.
	if _, errOut, code := alice(t, "task", "list", "--all"); code != 7 || !strings.Contains(errOut, "admin") {
		t.Fatalf("alice's list --all: exit %d %q, want 7", code, errOut)
	}
	if _, errOut, code := alice(t, "task", "resume", rootsTask); code != 3 || !strings.Contains(errOut, "not found") {
		t.Fatalf("alice resumes root's task: exit %d %q, want 3", code, errOut)
	}

	var resumed oneTask
	d.cliJSON(t, &resumed, "task", "resume", alicesTask)
	if resumed.Task.Principal != "alice" || resumed.Task.RunID != 2 {
		t.Fatalf("root's resume of alice's task: %+v", resumed.Task)
	}
	// The record is in alice's events, with root's name; alice sees it.
	w := startWatch(t, d, alicesTask)
	line := w.until(t, func(l watchLine) bool { return l.Kind == "event" && l.Type == "task.admin_act" })
	if p := string(line.Payload); !strings.Contains(p, `"by":"root"`) || !strings.Contains(p, "resume requested by admin root") {
		t.Fatalf("admin event payload: %s", p)
	}
	d.cliJSON(t, &resumed, "task", "cancel", alicesTask)
	if resumed.Task.Status != "cancelled" {
		t.Fatalf("root's cancel of alice's task: %+v", resumed.Task)
	}
	// Alice, the owner, sees both acts and who did them.
	out, errOut, code = alice(t, "task", "watch", alicesTask, "--json")
	if code != 1 || strings.Count(out, `"by":"root"`) != 2 || !strings.Contains(out, "cancel requested by admin root") {
		t.Fatalf("alice's watch of her task: exit %d %s\n%s", code, errOut, out)
	}
}
