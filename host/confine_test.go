package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/store"

	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

func TestOpenMarksTheHostNonDumpable(t *testing.T) {
	openHost(t, "", nil)
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil || d != 0 {
		t.Fatalf("PR_GET_DUMPABLE = %d, %v; want 0 after Open", d, err)
	}
}

// A plugin runs in its own empty private dir under the data dir — its cwd,
// HOME and TMPDIR — which is gone once it stopped.
func TestPluginPrivateDir(t *testing.T) {
	dir := shortTempDir(t)
	h := openHost(t, dir, nil)
	envFile := filepath.Join(shortTempDir(t), "env")
	task := create(t, h, alice, map[string]any{"env_file": envFile}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	env := waitFile(t, envFile)
	var tmp, home string
	for _, l := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(l, "TMPDIR="); ok {
			tmp = v
		}
		if v, ok := strings.CutPrefix(l, "HOME="); ok {
			home = v
		}
	}
	if filepath.Dir(tmp) != filepath.Join(dir, SocketDirName) || !strings.HasPrefix(filepath.Base(tmp), "run-") || home != tmp {
		t.Fatalf("TMPDIR=%q HOME=%q, want one DATA/plugins/run-* dir", tmp, home)
	}
	eventually(t, 10*time.Second, "the private dir removed", func() bool {
		_, err := os.Stat(tmp)
		return errors.Is(err, os.ErrNotExist)
	})
}

func TestRequireConfinementFailsClosedWithoutLandlock(t *testing.T) {
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(shortTempDir(t), "p"), RequireConfinement: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	spec := PluginSpec{Kind: "testexec", Path: filepath.Join(executorDir, ExecutorPrefix+"testexec"), Confine: DefaultConfinement()}
	noLandlock := confine.Support{Seccomp: true}
	_, err = launch(context.Background(), reg.forker, spec, reg.opts, noLandlock, pb.UnimplementedHostServicesServer{})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Check != "confinement" || !strings.Contains(ue.Detail, "none (no Landlock)") {
		t.Fatalf("err = %v, want unavailable (confinement) naming the missing Landlock", err)
	}
	reg.support = noLandlock
	if got := reg.Confinement("testexec"); got != "none (no Landlock)" {
		t.Errorf("Confinement without Landlock = %q", got)
	}
	// The same launch on this kernel, when it has Landlock, starts.
	if confine.Probe().LandlockABI < 1 {
		t.Skip("the kernel offers no Landlock: the control launch would fail too")
	}
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, confine.Probe(), pb.UnimplementedHostServicesServer{})
	if err != nil {
		t.Fatalf("control launch: %v", err)
	}
	ec.Stop()
}

func TestConfinementFromConfig(t *testing.T) {
	def := config.Default().Confinement
	tests := []struct {
		name string
		ex   config.Executor
		want confine.Rlimits
	}{
		{"defaults", config.Executor{}, confine.Rlimits{AddressSpace: 4096 << 20, NoFile: 1024, NProc: 4096}},
		{"own", config.Executor{MaxAddressSpaceMB: 512, MaxOpenFiles: 64, MaxProcesses: 16}, confine.Rlimits{AddressSpace: 512 << 20, NoFile: 64, NProc: 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := confinementFrom(def, tt.ex)
			if c.Rlimits != tt.want {
				t.Fatalf("rlimits %+v, want %+v", c.Rlimits, tt.want)
			}
			p := pluginPolicy(c, false, "/run/priv", "/run/sock")
			if !p.DropCaps || !p.Seccomp.DenyExec || !p.Seccomp.DenyFork || !p.Seccomp.DenyPtrace || !p.Seccomp.DenyNetwork || p.Landlock != confine.LandlockBestEffort {
				t.Errorf("policy %+v", p)
			}
			for _, rw := range p.ReadWrite {
				if rw != "/run/priv" && rw != "/run/sock" && rw != "/dev/null" {
					t.Errorf("unexpected read-write path %s", rw)
				}
			}
		})
	}
	if p := pluginPolicy(Confinement{Subprocesses: true}, true, "/p", "/s"); p.Seccomp.DenyExec || p.Seccomp.DenyFork || p.Landlock != confine.LandlockRequired {
		t.Errorf("subprocesses + required: %+v", p)
	}
}

func TestPluginUserMustNotBeRoot(t *testing.T) {
	c := Confinement{User: "root"}
	if err := c.resolveUser(); err == nil {
		t.Fatal("a plugin user resolving to uid 0 was accepted")
	}
	c = Confinement{User: "no-such-user-xyz"}
	if err := c.resolveUser(); err == nil {
		t.Fatal("an unknown plugin user was accepted")
	}
}

// [executors.NAME] user: the plugin runs as that user, in a run dir it can
// reach although the data dir is the daemon's alone, removed after it.
func TestPluginRunsAsItsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a plugin as another user")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody here")
	}
	h := openHost(t, "", func(c *config.Config) {
		ex := c.Executors["testexec"]
		ex.User = "nobody"
		c.Executors["testexec"] = ex
	})
	out := shortTempDir(t)
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(out, "env")
	task := create(t, h, alice, map[string]any{"env_file": envFile}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	env := waitFile(t, envFile)
	fi, err := os.Stat(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; strconv.Itoa(int(uid)) != u.Uid {
		t.Fatalf("the plugin wrote its file as uid %d, want %s (nobody)", uid, u.Uid)
	}
	var tmp string
	for _, l := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(l, "TMPDIR="); ok {
			tmp = v
		}
	}
	base := filepath.Dir(tmp)
	if !strings.HasPrefix(filepath.Base(base), "taskhost-plugin-") {
		t.Fatalf("TMPDIR=%q, want a run dir under a taskhost-plugin-* dir", tmp)
	}
	eventually(t, 10*time.Second, "the plugin user's run dir removed", func() bool {
		_, err := os.Stat(base)
		return errors.Is(err, os.ErrNotExist)
	})
}

// A script plugin runs by path with its own dir readable (what it execs
// lives there); pinned, it is refused: its interpreter would read it again
// by path after the pin was checked.
func TestScriptPlugin(t *testing.T) {
	dir := shortTempDir(t)
	real := filepath.Join(dir, "testexec-real")
	data, err := os.ReadFile(filepath.Join(executorDir, ExecutorPrefix+"testexec"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, data, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+real+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p")})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	c := DefaultConfinement()
	c.Subprocesses = true // the shell execs the real plugin
	spec := PluginSpec{Kind: "testexec", Path: wrapper, Confine: c}
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, pb.UnimplementedHostServicesServer{})
	if err != nil {
		t.Fatalf("unpinned script: %v", err)
	}
	ec.Stop()
	sum := sha256.Sum256([]byte("#!/bin/sh\nexec " + real + " \"$@\"\n"))
	spec.SHA256 = hex.EncodeToString(sum[:])
	_, err = launch(context.Background(), reg.forker, spec, reg.opts, reg.support, pb.UnimplementedHostServicesServer{})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Check != "binary" || !strings.Contains(ue.Detail, "is a script") {
		t.Fatalf("pinned script: err = %v, want unavailable (binary) saying it is a script", err)
	}
}
