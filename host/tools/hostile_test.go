package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/confine"
)

// hostileSetup is a data dir as the host lays it out: the store and the key
// beside the workspaces, another task's workspace with a secret in it.
type hostileSetup struct {
	r                       *Registry
	data, ws, victim, store string
	key                     string
}

const (
	storeSecret  = "store-secret-41c9"
	keySecret    = "key-secret-8a27"
	victimSecret = "victim-secret-63e1"
	envCanary    = "env-canary-0f5d"
)

func newHostileSetup(t *testing.T) hostileSetup {
	t.Helper()
	data := t.TempDir()
	r, err := New(Options{Tools: config.Default().Tools, WorkspaceRoot: filepath.Join(data, "workspaces")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if !r.Landlocked() {
		t.Skipf("the kernel offers no Landlock (%s): shell.run runs with no_new_privs and no capabilities only", r.Confinement())
	}
	s := hostileSetup{r: r, data: data, ws: workspace(t, r), store: filepath.Join(data, "taskhost.db"), key: filepath.Join(data, "host.key")}
	var werr error
	s.victim, werr = r.Workspace("victim_task")
	if werr != nil {
		t.Fatal(werr)
	}
	for path, content := range map[string]string{
		s.store: storeSecret, s.store + "-wal": storeSecret, s.key: keySecret,
		filepath.Join(s.victim, "notes.md"): victimSecret,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// An approved command is hostile: it tries to reach the store, the key,
// another task's workspace and the daemon's environment. Each attempt is
// refused by the kernel; nothing of the secrets reaches the output.
func TestHostileShellRunRefused(t *testing.T) {
	t.Setenv("TASKHOST_TEST_API_KEY", envCanary) // the daemon's secret, in its environ
	s := newHostileSetup(t)
	probes := []struct {
		name, command string
	}{
		{"read the store by a relative path", "cat ../../taskhost.db"},
		{"read the store", "cat " + s.store},
		{"read the store's WAL", "cat " + s.store + "-wal"},
		{"read the key", "cat " + s.key},
		{"copy the key", "cp " + s.key + " stolen.key"},
		{"list the data dir", "ls " + s.data},
		{"list another workspace", "ls " + s.victim},
		{"read another workspace", "cat " + filepath.Join(s.victim, "notes.md")},
		{"plant a file in another workspace", "echo planted > " + filepath.Join(s.victim, "planted")},
		{"replace another task's file", "mv notes.md " + filepath.Join(s.victim, "notes.md") + " 2>&1 || echo x > " + filepath.Join(s.victim, "notes.md")},
		{"link out of the workspace", "ln " + s.key + " key.link && cat key.link"},
		{"read the daemon's environ", "cat /proc/$PPID/environ"},
		{"read init's environ", "cat /proc/1/environ"},
		{"signal the daemon", "kill -0 $PPID"},
		{"leave its cgroup", "echo $$ > /sys/fs/cgroup/unified/cgroup.procs"},
		{"write /tmp", "echo x > /tmp/taskhost-hostile-probe"},
		// Never a real system file: a test that fails must not damage
		// the machine.
		{"write /etc", "echo x > /etc/taskhost-hostile-probe"},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			out, res := runShellTool(t, s.r, p.command)
			if out.ExitCode == 0 || !res.IsError {
				t.Errorf("%q exited 0: %q", p.command, out.Output)
			}
			for _, secret := range []string{storeSecret, keySecret, victimSecret, envCanary} {
				if strings.Contains(out.Output, secret) {
					t.Errorf("%q got a secret out: %q", p.command, out.Output)
				}
			}
			if !strings.Contains(out.Output, "denied") && !strings.Contains(out.Output, "not permitted") &&
				!strings.Contains(out.Output, "No such file") && !strings.Contains(out.Output, "cross-device link") {
				t.Errorf("%q failed for another reason than a refusal: %q", p.command, out.Output)
			}
		})
	}
	for _, f := range []string{filepath.Join(s.victim, "planted"), "/tmp/taskhost-hostile-probe", "/etc/taskhost-hostile-probe"} {
		if _, err := os.Stat(f); err == nil {
			os.Remove(f)
			t.Errorf("%s was planted", f)
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.victim, "notes.md")); err != nil || string(b) != victimSecret+"\n" {
		t.Errorf("the victim's notes.md is now %q, %v", b, err)
	}
}

// The command keeps what it needs: its workspace, read and written, files
// the model wrote there, the system's programs.
func TestConfinedShellRunKeepsItsWorkspace(t *testing.T) {
	t.Parallel()
	s := newHostileSetup(t)
	mustCall(t, s.r, ToolWorkspaceWrite, map[string]any{"path": "in/model.txt", "content": "from the model\n"}, nil)
	out, _ := runShellTool(t, s.r, `cat in/model.txt && echo made > out.txt && mkdir -p d/e && echo deep > d/e/f &&
cat d/e/f && mv d/e/f d/g && rm -r d && printf '%s\n' "$(wc -l < out.txt)" && tmp=$(mktemp) && echo t > "$tmp" && rm "$tmp" &&
ls | sort | tr '\n' ' ' && echo && awk 'BEGIN{print "awk ok"}' && head -c 4 /dev/urandom | wc -c &&
printf 'echo script ok\n' > s.sh && sh s.sh && rm s.sh && echo done`)
	want := "from the model\ndeep\n1\nin out.txt \nawk ok\n4\nscript ok\ndone\n"
	if out.ExitCode != 0 || out.Output != want {
		t.Fatalf("exit %d, output %q, want %q", out.ExitCode, out.Output, want)
	}
	var read struct{ Content string }
	mustCall(t, s.r, ToolWorkspaceRead, map[string]any{"path": "out.txt"}, &read)
	if read.Content != "made\n" {
		t.Fatalf("workspace.read of the command's file: %q", read.Content)
	}
}

// The hostile command that leaves a process behind with setsid is
// contained: the process dies with the call.
func TestHostileShellRunSetsidContained(t *testing.T) {
	needSetsid(t)
	s := newHostileSetup(t)
	if s.r.cgroups == nil {
		t.Skip("no writable cgroup2: the session fallback cannot hold a setsid'd process whose parent is gone")
	}
	out, _ := runShellTool(t, s.r, `setsid sh -c 'echo $$ > bg.pid; exec sleep 346' & while [ ! -s bg.pid ]; do :; done; echo started`)
	if out.Output != "started\n" {
		t.Fatalf("output %q", out.Output)
	}
	pid := readPID(t, filepath.Join(s.ws, "bg.pid"))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	deadline := time.Now().Add(10 * time.Second)
	for !processDead(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the setsid'd process %d outlived the call", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// On a kernel without Landlock (simulated: the probe's answer), shell.run
// refuses to run when confinement is required, and says how it runs
// otherwise.
func TestShellRunWithoutLandlock(t *testing.T) {
	t.Parallel()
	for _, required := range []bool{true, false} {
		r, err := New(Options{Tools: config.Default().Tools, WorkspaceRoot: filepath.Join(t.TempDir(), "ws"), RequireConfinement: required})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		r.confine.support = confine.Support{}
		if r.Landlocked() || !strings.HasPrefix(r.Confinement(), "none (no Landlock)") {
			t.Errorf("required=%v: Landlocked %v, Confinement %q", required, r.Landlocked(), r.Confinement())
		}
		_, err = callTool(t, t.Context(), r, ToolShellRun, map[string]any{"command": "touch ran"})
		ws, _ := r.Workspace(testTask)
		_, statErr := os.Stat(filepath.Join(ws, "ran"))
		if required && (!errors.Is(err, ErrUnconfined) || statErr == nil) {
			t.Errorf("required: Call = %v, ran = %v; want ErrUnconfined and nothing run", err, statErr == nil)
		}
		if !required && (err != nil || statErr != nil) {
			t.Errorf("not required: Call = %v, ran = %v; want it run", err, statErr == nil)
		}
	}
}
