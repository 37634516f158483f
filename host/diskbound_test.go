package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// The hostile review's disk filler, through the daemon: a task's approved
// command writes 200 MB into its workspace on a data dir of 256 MiB (room
// for the workspace's 64 MiB twice over and the store's log of it: a
// step's workspace is stored with the step). Its
// writes stop at the workspace's 64 MiB (the command's own filesystem is
// full, not the data dir's), its task fails only by its own step budget, and a task running beside
// it and one created after it complete — none ends store_error, no create
// is refused. Before, the command filled the data dir's filesystem: the
// other task was interrupted store_error and creates were refused.
func TestDiskFillerCommandTouchesNoOtherTask(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the filesystem bound of a command's writes needs a root daemon")
	}
	dir := testfs.MountTmpfs(t, testwait.ShortTempDir(t), 256<<20)
	h := openHost(t, dir, shellNoApproval)
	ctl := testwait.PluginDir(t) // off the data dir
	release := filepath.Join(ctl, "release")
	beside := create(t, h, alice, map[string]any{"steps": 2, "wait_file": release, "pid_file": filepath.Join(ctl, "pid")}, Limits{})
	readPid(t, filepath.Join(ctl, "pid"))

	filler := create(t, h, alice, map[string]any{"steps": 1, "call_tool": map[string]any{"name": tools.ToolShellRun,
		"args": map[string]any{"command": "head -c 200000000 /dev/zero > fill"}}}, Limits{Steps: 2})
	// Each step's command ends with limit "disk", an error result the
	// executor goes on from: the steps run out, and nothing else happens.
	wantStatus(t, waitEnd(t, h, alice, filler.ID), store.StatusFailed, store.ReasonStepBudgetExhausted)
	fi, err := os.Stat(filepath.Join(h.Runner.workspace(filler.ID), "fill"))
	if err != nil || fi.Size() > tools.MaxWorkspaceBytes {
		t.Errorf("the filler's file: %v, %v; want at most the workspace limit %d", fi, err, tools.MaxWorkspaceBytes)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < 16<<20 {
		t.Errorf("the data dir's filesystem has %d bytes left after the filler", free)
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, beside.ID), store.StatusCompleted, "")
	after := create(t, h, alice, map[string]any{"steps": 1}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, after.ID), store.StatusCompleted, "")
	if _, err := h.Runner.Get(context.Background(), alice, after.ID); err != nil {
		t.Fatal(err)
	}
}
