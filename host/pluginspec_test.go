package host

import (
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
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
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
	dir := testwait.ShortTempDir(t)
	h := openHost(t, dir, nil)
	envFile := filepath.Join(testwait.PluginDir(t), "env")
	task := create(t, h, alice, map[string]any{"env_file": envFile}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	env := testwait.File(t, envFile)
	var tmp, home string
	for _, l := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(l, "TMPDIR="); ok {
			tmp = v
		}
		if v, ok := strings.CutPrefix(l, "HOME="); ok {
			home = v
		}
	}
	// A root daemon runs the plugin under a uid of its pool, which cannot
	// reach the data dir: its run dir is a fresh one in the temp dir.
	base, want := filepath.Dir(tmp), "DATA/plugins/run-*"
	baseOK := base == filepath.Join(dir, datadir.SocketDirName)
	if h.Registry.OwnUIDs() {
		want = os.TempDir() + "/taskhost-plugin-*/run-*"
		baseOK = filepath.Dir(base) == os.TempDir() && strings.HasPrefix(filepath.Base(base), "taskhost-plugin-")
	}
	if !baseOK || !strings.HasPrefix(filepath.Base(tmp), "run-") || home != tmp {
		t.Fatalf("TMPDIR=%q HOME=%q, want one %s dir", tmp, home, want)
	}
	testwait.Until(t, 10*time.Second, "the private dir removed", func() bool {
		_, err := os.Stat(tmp)
		return errors.Is(err, os.ErrNotExist)
	})
}

// A plugin's environment sets GOMAXPROCS to the CPUs its cpu_percent
// lets it use: 1 by default, so that a Go plugin's idle threads do not
// spin for work on CPUs its cgroup does not give it.
func TestPluginGOMAXPROCSFollowsItsCPUBound(t *testing.T) {
	for _, c := range []struct {
		cpuPercent int
		want       string
	}{{0, "1"}, {250, "3"}} {
		t.Run(strconv.Itoa(c.cpuPercent), func(t *testing.T) {
			t.Parallel()
			h := openHost(t, "", func(cfg *config.Config) {
				ex := cfg.Executors["testexec"]
				ex.CPUPercent = c.cpuPercent
				cfg.Executors["testexec"] = ex
			})
			envFile := filepath.Join(testwait.PluginDir(t), "env")
			task := create(t, h, alice, map[string]any{"env_file": envFile}, Limits{})
			wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
			var got []string
			for _, l := range strings.Split(testwait.File(t, envFile), "\n") {
				if v, ok := strings.CutPrefix(l, "GOMAXPROCS="); ok {
					got = append(got, v)
				}
			}
			if len(got) != 1 || got[0] != c.want {
				t.Fatalf("cpu_percent %d: GOMAXPROCS %q in the plugin's environment, want exactly %q", c.cpuPercent, got, c.want)
			}
		})
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
	out := testwait.ShortTempDir(t)
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(out, "env")
	task := create(t, h, alice, map[string]any{"env_file": envFile}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	env := testwait.File(t, envFile)
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
	testwait.Until(t, 10*time.Second, "the plugin user's run dir removed", func() bool {
		_, err := os.Stat(base)
		return errors.Is(err, os.ErrNotExist)
	})
}
