package tools

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/testfs"
)

// containment is one way of holding a command's processes; tests run
// against each this machine has.
type containment struct {
	name string
	// setsidExitCaught: a setsid'd process whose shell already exited is
	// killed too. Only the cgroup holds that.
	setsidExitCaught bool
	set              func(r *Registry)
}

func containments(t *testing.T) []containment {
	t.Helper()
	cs := []containment{{name: "session", set: func(r *Registry) { r.cgroups = nil }}}
	if cgroups.FindTree2() != nil {
		cs = append(cs, containment{name: "cgroup", setsidExitCaught: true, set: func(*Registry) {}})
	} else {
		t.Log("no writable cgroup2 here: only the session fallback is tested")
	}
	return cs
}

func needSetsid(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid not installed")
	}
}

// A process that left the command's session with setsid dies with the
// command: when the call is cancelled, when the timeout hits, when the
// registry is closed (the daemon stops), and — with a cgroup — when the
// shell simply exits first.
func TestShellRunSetsidDescendantDies(t *testing.T) {
	needSetsid(t)
	// The escapee writes its pid once it leads a session of its own, and
	// the command waits for that: nothing is stopped before it escaped.
	const escape = `setsid sh -c 'echo $$ > bg.pid; exec sleep 346' & while [ ! -s bg.pid ]; do :; done; `
	type stop int
	const (
		byExit stop = iota
		byCancel
		byTimeout
		byClose
	)
	stops := []struct {
		name    string
		how     stop
		command string
	}{
		{"shell exits", byExit, escape + "echo started"},
		{"cancel", byCancel, escape + "sleep 300"},
		{"timeout", byTimeout, escape + "sleep 300"},
		{"registry close", byClose, escape + "sleep 300"},
	}
	for _, c := range containments(t) {
		for _, s := range stops {
			t.Run(c.name+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				if s.how == byExit && !c.setsidExitCaught {
					t.Skip("the session fallback cannot find a setsid'd process whose parent is gone (docs/security.md)")
				}
				r := newTestRegistry(t, nil)
				c.set(r)
				ws := workspace(t, r)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				a := map[string]any{"command": s.command}
				if s.how == byTimeout {
					a["timeout_seconds"] = 1
				}
				done := make(chan callResult, 1)
				go func() {
					res, err := callTool(t, ctx, r, ToolShellRun, a)
					done <- callResult{res, err}
				}()
				pid := readPID(t, filepath.Join(ws, "bg.pid"))
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
				if s.how != byExit && sessionOf(pid) != pid {
					t.Fatalf("process %d is not a session leader: the test proves nothing", pid)
				}
				switch s.how {
				case byCancel:
					cancel()
				case byClose:
					if err := r.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
				}
				got := recvResult(t, done)
				switch s.how {
				case byExit:
					if got.err != nil || !strings.Contains(got.res.Output, "started") {
						t.Fatalf("Call = %+v, %v", got.res, got.err)
					}
				case byCancel:
					if !errors.Is(got.err, context.Canceled) {
						t.Fatalf("error = %v, want context.Canceled", got.err)
					}
				case byTimeout:
					if !errors.Is(got.err, ErrTimeout) {
						t.Fatalf("error = %v, want ErrTimeout", got.err)
					}
				case byClose:
					if !errors.Is(got.err, ErrClosed) {
						t.Fatalf("error = %v, want ErrClosed", got.err)
					}
				}
				waitFor(t, "the setsid'd process "+strconv.Itoa(pid)+" to die", func() bool { return processDead(pid) })
			})
		}
	}
}

// Without a cgroup, the fallback still cannot let a setsid'd escapee keep
// Call waiting on the output pipe; this documents where it stops holding.
func TestShellRunSessionFallbackEscapee(t *testing.T) {
	t.Parallel()
	needSetsid(t)
	r := newTestRegistry(t, nil)
	r.cgroups = nil
	ws := workspace(t, r)
	out, _ := runShellTool(t, r, `setsid sh -c 'echo $$ > bg.pid; exec sleep 300' & while [ ! -s bg.pid ]; do :; done; echo started`)
	pid := readPID(t, filepath.Join(ws, "bg.pid"))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if out.ExitCode != 0 || out.Output != "started\n" {
		t.Fatalf("got %+v", out)
	}
}

// After Close, no tool runs.
func TestRegistryClosedRefusesCalls(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ToolShellRun, ToolWorkspaceList} {
		_, err := callTool(t, t.Context(), r, name, map[string]any{"command": "true"})
		if name == ToolWorkspaceList {
			_, err = callTool(t, t.Context(), r, name, nil)
		}
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// Each command gets a cgroup of its own, which is gone once Call returns;
// Close removes the registry's parent cgroup.
func TestShellRunCgroupLifecycle(t *testing.T) {
	tree := cgroups.FindTree2()
	if tree == nil {
		t.Skip("no writable cgroup2 on this machine")
	}
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan callResult, 1)
	go func() {
		res, err := callTool(t, ctx, r, ToolShellRun, map[string]any{"command": "echo $$ > sh.pid; sleep 300"})
		done <- callResult{res, err}
	}()
	// Read from outside: a confined command cannot read /proc.
	cgText, err := os.ReadFile("/proc/" + strconv.Itoa(readPID(t, filepath.Join(ws, "sh.pid"))) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	recvResult(t, done)
	var cg string
	for line := range strings.SplitSeq(string(cgText), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			cg = p
		}
	}
	want := "/taskhost-" + strconv.Itoa(os.Getpid()) + "/cmd-"
	if !strings.Contains(cg, want) {
		t.Fatalf("the command ran in cgroup %q, want one under %q", cg, want)
	}
	dir := filepath.Join(filepath.Dir(tree.Parent()), strings.TrimPrefix(cg[strings.Index(cg, "/taskhost-"):], "/"))
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the command's cgroup %s is still there after the call: %v", dir, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if others := otherRegistriesRunning(tree); !others {
		if _, err := os.Stat(tree.Parent()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the registry's cgroup %s is still there after Close: %v", tree.Parent(), err)
		}
	}
}

// otherRegistriesRunning: parallel tests of this process may hold command
// cgroups under the same parent.
func otherRegistriesRunning(tree *cgroups.Tree2) bool {
	entries, _ := os.ReadDir(tree.Parent())
	for _, e := range entries {
		if e.IsDir() {
			return true
		}
	}
	return false
}

// A daemon killed with SIGKILL leaves its commands' processes behind in
// taskhost-<pid>; the next registry kills them and removes the cgroups.
func TestStaleCgroupsSwept(t *testing.T) {
	tree := cgroups.FindTree2()
	if tree == nil {
		t.Skip("no writable cgroup2 on this machine")
	}
	// A pid that no longer runs stands for the dead daemon.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := gone.Process.Pid
	if cgroups.ProcessAlive(deadPID) {
		t.Skip("the pid was reused at once")
	}
	stale := filepath.Join(filepath.Dir(tree.Parent()), "taskhost-"+strconv.Itoa(deadPID))
	cmd := filepath.Join(stale, "cmd-stale")
	t.Cleanup(func() { os.Remove(cmd); os.Remove(stale) })
	leftover := exec.Command("sleep", "346")
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leftover.Process.Kill() })
	testfs.StaleCgroup(t, cmd, leftover.Process.Pid)
	reaped := make(chan struct{})
	go func() { leftover.Wait(); close(reaped) }()

	r, err := New(Options{Tools: config.Default().Tools, WorkspaceRoot: filepath.Join(t.TempDir(), "ws")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-reaped
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale cgroup %s still there: %v", stale, err)
	}
}

// sessionOf returns a process's session id, or -1.
func sessionOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 4 {
		return -1
	}
	sid, _ := strconv.Atoi(f[3])
	return sid
}
