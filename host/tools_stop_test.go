package host

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Daemon stop: a process that an approved shell.run moved into a session of
// its own (setsid) dies with the host, not only the command's process
// group.
func TestHostCloseKillsSetsidDescendantOfShellRun(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid not installed")
	}
	h := openHost(t, "", shellNoApproval)
	cmd := `setsid sh -c 'echo $$ > bg.pid; exec sleep 346' & while [ ! -s bg.pid ]; do :; done; sleep 300`
	task := create(t, h, alice, map[string]any{"call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": cmd}}}, Limits{})
	pid := readPid(t, filepath.Join(h.Runner.workspace(task.ID), "bg.pid"))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err := h.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitGone(t, pid, 10*time.Second)
}
