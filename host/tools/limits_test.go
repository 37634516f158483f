package tools

import (
	"os"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/uids"
)

// Each shell.run command runs within its rlimits: a file written past
// max_file_mb ends it with SIGXFSZ (limit "file_size"), a CPU burner past
// max_cpu_seconds with SIGXCPU (limit "cpu"), a memory hog gets no memory
// past max_memory_mb, and a fork bomb no process past max_processes — when
// the daemon is root the command has a uid of its own, so that bound is
// the command's alone. Before, a command had no bound but its timeout.
func TestShellRunResourceLimits(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+200000, func(sh *config.Tool) {
		sh.TimeoutSeconds = 20
		sh.MaxFileMB, sh.MaxCPUSeconds, sh.MaxMemoryMB, sh.MaxProcesses = 1, 1, 64, 16
	})
	type result struct {
		ExitCode int    `json:"exit_code"`
		Signal   string `json:"signal"`
		Limit    string `json:"limit"`
		Output   string `json:"output"`
	}
	run := func(command string) result {
		t.Helper()
		res, err := callTool(t, t.Context(), r, ToolShellRun, map[string]any{"command": command})
		if err != nil {
			t.Fatal(err)
		}
		var out result
		decode(t, res, &out)
		return out
	}
	if got := run("head -c 2000000 /dev/zero > big"); got.Limit != "file_size" {
		t.Errorf("a 2 MB file under max_file_mb 1: %+v, want ended by file_size", got)
	}
	if got := run("while :; do :; done"); got.Limit != "cpu" {
		t.Errorf("a CPU burner under max_cpu_seconds 1: %+v, want ended by cpu", got)
	}
	if got := run(`awk 'BEGIN { s = "x"; while (1) s = s s }'`); got.ExitCode == 0 || !strings.Contains(strings.ToLower(got.Output), "memory") {
		t.Errorf("a memory hog under max_memory_mb 64: %+v, want it refused memory", got)
	}
	if os.Geteuid() != 0 {
		t.Skip("max_processes bounds a command as a whole only under a root daemon's own uid per command")
	}
	// 40 sleeping children against a bound of 16 processes: the shell
	// cannot fork past it, and gives up — or, with a pids cgroup, the
	// command is ended at the refused fork (limit "processes").
	got := run(`i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done; echo all-started`)
	if strings.Contains(got.Output, "all-started") || got.ExitCode == 0 ||
		got.Limit != limitProcesses && !strings.Contains(strings.ToLower(got.Output), "fork") {
		t.Errorf("a fork loop under max_processes 16: %+v, want it refused forks and ended", got)
	}
}
