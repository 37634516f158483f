// Package integration tests taskhost as its users run it: real binaries, real
// processes, real SIGKILLs, a real SQLite file.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
)

// binDir holds taskhost and the executors, built once for the package.
var binDir string

func TestMain(m *testing.M) {
	// Should a test here open a host in-process, this binary is its
	// plugins' trampoline.
	confine.Main()
	dir, err := testbin.TempDir(context.Background(), "thint",
		testbin.Build{Package: testbin.Taskhost},
		testbin.Build{Package: testbin.Confine},
		testbin.Executor("testexec", testbin.Testexec),
		testbin.Executor("hostileexec", testbin.Hostileexec),
		testbin.Build{Package: testbin.Legacy},
		testbin.Build{Package: testbin.MachineSpirit})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := testpg.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// taskhost runs the taskhost binary to completion.
func taskhost(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return taskhostFor(t, 60*time.Second, args...)
}

// taskhostFor is taskhost with a bound of its own, for a command that runs
// long by design (bench).
func taskhostFor(t *testing.T, bound time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "taskhost"), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("taskhost %v: %v\n%s", args, err, e.String())
	}
	return o.String(), e.String(), code
}

// started is a taskhost process running in the background.
type started struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
}

func startTaskhost(t *testing.T, args ...string) *started {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "taskhost"), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var e bytes.Buffer
	cmd.Stderr = &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, lines: make(chan string, 1000), stderr: &e}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		io.Copy(io.Discard, out)
		close(s.lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		// Only `taskhost run` hosts on its data dir; a client command's
		// --data-dir may name a daemon's that is still running.
		if i := slices.Index(args, "--data-dir"); args[0] == "run" && i >= 0 && i+1 < len(args) {
			datadir.SweepRunDirs(args[i+1])
		}
	})
	return s
}

// line waits for the next stdout line for which match is true.
func (s *started) line(t *testing.T, match func(string) bool) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("taskhost ended before the expected line; stderr:\n%s", s.stderr)
			}
			if match(l) {
				return l
			}
		case <-timeout:
			t.Fatal("timed out waiting for a line from taskhost")
		}
	}
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testwait.Until(t, 15*time.Second, "pid file "+path, func() bool {
		data, err := testwait.ReadLive(path) // a running command's, in its own view
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

func writeSpec(t *testing.T, dir string, spec map[string]any) string {
	t.Helper()
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// inspected is the JSON of 'taskhost inspect ID --json'.
type inspected struct {
	Task struct {
		ID      string `json:"id"`
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		RunID   int64  `json:"run_id"`
		Budgets map[string]struct {
			Used  int64 `json:"used"`
			Limit int64 `json:"limit"`
		} `json:"budgets"`
	} `json:"task"`
	Attempts []struct {
		Attempt int64  `json:"attempt"`
		RunID   int64  `json:"run_id"`
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Exit    string `json:"exit"`
	} `json:"attempts"`
}

func inspect(t *testing.T, dataDir, id string) inspected {
	t.Helper()
	out, errOut, code := taskhost(t, "inspect", "--data-dir", dataDir, "--json", id)
	if code != 0 {
		t.Fatalf("inspect exit %d: %s", code, errOut)
	}
	var v inspected
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("inspect output %q: %v", out, err)
	}
	return v
}
