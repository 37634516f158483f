package host

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/store"
)

// With PostgreSQL's peer authentication on its unix socket (Debian's
// default, the DSN example of docs/operations.md), the daemon's own OS user
// logs in as the database role of that name; an approved shell.run command
// of a root daemon runs under a uid of its own, which has no name, so peer
// authentication maps it to no role and the store stays out of its reach.
// Before, the command ran as the daemon's uid and read (and wrote) every
// principal's rows.
func TestShellRunCannotLogInToPostgresAsTheDaemon(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a command runs under a uid of its own only when the daemon is root")
	}
	psqls, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	if len(psqls) == 0 {
		t.Skip("no psql under /usr/lib/postgresql (apt-get install postgresql-client), where a confined command can run it")
	}
	psql := psqls[len(psqls)-1]
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	sock := testpg.Private(t).PeerAuth(t, me.Username)
	login := psql + " -h " + sock + " -U " + me.Username + " -d postgres -Atc 'SELECT 40 + 2'"

	// The control: the daemon's own user gets in by its name alone.
	if out, err := exec.Command("/bin/sh", "-c", login).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("the daemon's user does not log in by peer authentication: %v: %s", err, out)
	}

	h := openHost(t, "", shellNoApproval)
	task := create(t, h, alice, map[string]any{"steps": 1, "call_tool": map[string]any{"name": "shell.run", "args": map[string]any{
		"command": login + " > out 2>&1; echo exit=$? >> out"}}}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, store.ReasonNone)
	out, err := os.ReadFile(filepath.Join(h.Runner.workspace(task.ID), "out"))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(strings.Fields(string(out)), "42") || strings.Contains(string(out), "exit=0") {
		t.Fatalf("a shell.run command logged in as the daemon's role %q:\n%s", me.Username, out)
	}
	if !strings.Contains(string(out), "authentication failed") && !strings.Contains(string(out), "no user name") {
		t.Errorf("the command was refused, but not by peer authentication:\n%s", out)
	}
	t.Logf("the command's login: %s", strings.TrimSpace(string(out)))
}
