package host

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/uids"
	"github.com/taskhost/taskhost/store"
)

// An approved shell.run command of a root daemon runs under a uid of its
// own from [confinement]'s range, never the daemon's, and writes its
// workspace as that uid; once it is gone the workspace is the daemon's
// again, with the set-id and group/other write bits the command set
// cleared, so the host's tools, backup and delete keep working on it.
func TestShellRunUnderItsOwnUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a command runs under a uid of its own only when the daemon is root")
	}
	h := openHost(t, "", shellNoApproval)
	command := "id -u >> uids; id -g >> gids; echo x > f; chmod 6777 f; mkdir -p d/e; touch d/e/g; chmod 0777 . d"
	task := create(t, h, alice, map[string]any{"steps": 2, "call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": command}}}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, store.ReasonNone)
	ws := filepath.Join(h.DataDir, datadir.WorkspaceDirName, task.ID)
	pool := uids.Range{First: config.Default().Confinement.UIDFirst, Count: config.Default().Confinement.UIDCount}
	for _, name := range []string{"uids", "gids"} {
		data, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(string(data))
		if len(lines) != 2 {
			t.Fatalf("%s: %q, want one line per command", name, data)
		}
		for _, l := range lines {
			id, err := strconv.Atoi(l)
			if err != nil || !pool.Contains(id) {
				t.Errorf("%s: a command ran as %q, want an id of %s", name, l, pool)
			}
		}
	}
	for _, rel := range []string{".", "uids", "f", "d", "d/e", "d/e/g"} {
		fi, err := os.Lstat(filepath.Join(ws, rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
			t.Errorf("%s is %d:%d after the command, want the daemon's %d:%d", rel, st.Uid, st.Gid, os.Geteuid(), os.Getegid())
		}
		if m := fi.Mode(); m&(os.ModeSetuid|os.ModeSetgid) != 0 || m.Perm()&0o022 != 0 {
			t.Errorf("%s has mode %v after the command: set-id or group/other write bits kept", rel, m)
		}
	}
	if fi, err := os.Stat(ws); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("workspace mode %v, %v; want 0700", fi.Mode(), err)
	}
}
