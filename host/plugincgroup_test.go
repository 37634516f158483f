package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// needPluginCgroups skips where this daemon could give its plugins no
// cgroup limits (docs/security.md: they keep their rlimits alone there).
func needPluginCgroups(t *testing.T) cgroups.Set {
	t.Helper()
	set := cgroups.Find(true)
	if !set.Limited() {
		t.Skipf("no cgroup limits for plugins here: %s", set.Why)
	}
	return set
}

// pluginCgroupDirs reads, from outside, the cgroups the process pid is in
// below this daemon's own trees: one per v1 hierarchy and the cgroup2 one.
func pluginCgroupDirs(t *testing.T, set cgroups.Set, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatalf("the plugin's cgroups: %v", err)
	}
	parents := map[string]string{}
	if set.V2 != nil {
		parents[""] = set.V2.Parent()
	}
	if set.V1 != nil {
		for c, p := range set.V1.Parents() {
			parents[c] = p
		}
	}
	own := "/taskhost-" + strconv.Itoa(os.Getpid()) + "/"
	var dirs []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		parent, ok := parents[parts[1]]
		if !ok || !strings.Contains(parts[2], own) {
			continue
		}
		name := filepath.Base(parts[2])
		if !strings.HasPrefix(name, "plugin-") {
			t.Errorf("the plugin runs in cgroup %s, not a plugin-* one of its own", parts[2])
		}
		dirs = append(dirs, filepath.Join(parent, name))
	}
	if want := len(parents); len(dirs) != want {
		t.Fatalf("the plugin is in %d cgroups of this daemon's (%v), want %d:\n%s", len(dirs), dirs, want, b)
	}
	return dirs
}

func waitCgroupsGone(t *testing.T, dirs []string) {
	t.Helper()
	testwait.Until(t, 15*time.Second, fmt.Sprintf("the plugin's cgroups %v to be removed", dirs), func() bool {
		for _, d := range dirs {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				return false
			}
		}
		return true
	})
}

// crashLimit returns the limit the task's executor.crashed event names.
func crashLimit(t *testing.T, h *Host, id string) string {
	t.Helper()
	evs, err := h.Runner.Events(context.Background(), alice, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type != EventExecutorCrashed {
			continue
		}
		var p struct {
			Limit string `json:"limit"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		return p.Limit
	}
	t.Fatalf("task %s has no %s event", id, EventExecutorCrashed)
	return ""
}

// A plugin that hogs memory, and one that forks in a loop, each end their
// own step — interrupted, executor_crashed, the limit named in the message
// and the executor.crashed event — while another task's plugin, running
// beside them with a grandchild, completes; each plugin ran in cgroups of
// its own with [executors.NAME]'s limits, its grandchild in them too, and
// none is left once its process ended. Before, the hog took its 512 MiB
// and completed, and the fork loop failed its task after RLIMIT_NPROC
// refused it.
func TestPluginLimitsEndOnlyTheirOwnTask(t *testing.T) {
	set := needPluginCgroups(t)
	h := openHost(t, "", func(c *config.Config) {
		te := c.Executors["testexec"]
		te.MemoryMB, te.MaxProcesses, te.CPUPercent = 128, 64, 150
		c.Executors["testexec"] = te
	})
	ctl := testwait.PluginDir(t)
	release := filepath.Join(ctl, "release")
	besidePID := filepath.Join(ctl, "beside.pid")
	beside := create(t, h, alice, map[string]any{"steps": 2, "wait_file": release, "pid_file": besidePID, "spawn_grandchild": true}, Limits{})
	pid := readPid(t, besidePID)
	besideDirs := pluginCgroupDirs(t, set, pid)
	if grand := readPid(t, besidePID+".grandchild"); !slices.Equal(pluginCgroupDirs(t, set, grand), besideDirs) {
		t.Errorf("the plugin's grandchild is in other cgroups than the plugin's %v", besideDirs)
	}
	checkLimitFiles(t, set, besideDirs, 128<<20, 64, 150)

	for _, tc := range []struct {
		name, limit string
		knobs       map[string]any
	}{
		{"memory hog", cgroups.LimitMemory, map[string]any{"hog_memory_mb": 512}},
		{"fork loop", cgroups.LimitProcesses, map[string]any{"fork_processes": 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(ctl, strings.ReplaceAll(tc.name, " ", "-")+".pid")
			goFile := filepath.Join(ctl, strings.ReplaceAll(tc.name, " ", "-")+".go")
			knobs := map[string]any{"steps": 1, "pid_file": pidFile, "wait_file": goFile, "wait_first": true}
			for k, v := range tc.knobs {
				knobs[k] = v
			}
			hog := create(t, h, alice, knobs, Limits{Steps: 2})
			dirs := pluginCgroupDirs(t, set, readPid(t, pidFile))
			if err := os.WriteFile(goFile, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			got := waitEnd(t, h, alice, hog.ID)
			wantStatus(t, got, store.StatusInterrupted, store.ReasonExecutorCrashed)
			t.Logf("%s: %s", tc.name, got.Message)
			if !strings.Contains(got.Message, tc.limit+" limit") {
				t.Errorf("message %q does not name the %s limit", got.Message, tc.limit)
			}
			if l := crashLimit(t, h, hog.ID); l != tc.limit {
				t.Errorf("executor.crashed names limit %q, want %q", l, tc.limit)
			}
			waitCgroupsGone(t, dirs)
		})
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, beside.ID), store.StatusCompleted, store.ReasonNone)
	waitCgroupsGone(t, besideDirs)
}

// checkLimitFiles reads the limits the kernel holds for a plugin's cgroups.
func checkLimitFiles(t *testing.T, set cgroups.Set, dirs []string, memory int64, pids, cpuPercent int) {
	t.Helper()
	want := map[string]string{}
	if set.Mode == cgroups.ModeCgroup2 {
		want["memory.max"] = strconv.FormatInt(memory, 10)
		want["pids.max"] = strconv.Itoa(pids)
		want["cpu.max"] = fmt.Sprintf("%d 100000", cpuPercent*1000)
	} else {
		want["memory.limit_in_bytes"] = strconv.FormatInt(memory, 10)
		want["pids.max"] = strconv.Itoa(pids)
		want["cpu.cfs_quota_us"] = strconv.Itoa(cpuPercent * 1000)
	}
	for file, v := range want {
		found := false
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
				found = true
				if got := strings.TrimSpace(string(b)); got != v {
					t.Errorf("%s/%s = %s, want %s", d, file, got, v)
				}
			}
		}
		if !found {
			t.Errorf("no cgroup of the plugin's has %s", file)
		}
	}
}

// A daemon killed by SIGKILL leaves its plugins' cgroups behind, with
// whatever still ran there; the next daemon kills that and removes them at
// its start.
func TestStalePluginCgroupsSwept(t *testing.T) {
	set := needPluginCgroups(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid
	if cgroups.ProcessAlive(dead) {
		t.Skip("the pid was reused at once")
	}
	var parents []string
	if set.V2 != nil {
		parents = append(parents, set.V2.Parent())
	}
	if set.V1 != nil {
		for _, p := range set.V1.Parents() {
			parents = append(parents, p)
		}
	}
	var stale, dirs []string
	for _, p := range parents {
		tree := filepath.Join(filepath.Dir(p), "taskhost-"+strconv.Itoa(dead))
		dir := filepath.Join(tree, "plugin-stale")
		// After the kill below (cleanups run last first): a cgroup with a
		// process in it cannot be removed.
		t.Cleanup(func() { os.Remove(dir); os.Remove(tree) })
		stale, dirs = append(stale, tree), append(dirs, dir)
	}
	leftover := exec.Command("sleep", "347")
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { leftover.Wait(); close(reaped) }()
	t.Cleanup(func() { leftover.Process.Kill(); <-reaped })
	for _, dir := range dirs {
		testfs.StaleCgroup(t, dir, leftover.Process.Pid)
	}
	openHost(t, "", nil)
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Fatal("the process in a dead daemon's plugin cgroup outlived the next daemon's start")
	}
	for _, d := range stale {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale %s: %v, want it removed", d, err)
		}
	}
}

// A plugin under a uid of its own that fills its TMPDIR stops at its run
// dir's tmpfs ([confinement] disk_mb) with ENOSPC, its task failing with
// the error, while another task runs on; the tmpfs is gone with the
// plugin. Before the run dir was a tmpfs, the 48 MiB landed on the system
// temp dir's filesystem and the task completed.
func TestOwnUIDPluginDiskIsBounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root daemon runs plugins under uids of their own, in run dirs it mounts")
	}
	h := openHost(t, "", func(c *config.Config) { c.Confinement.DiskMB = 16 })
	ctx := context.Background()
	filler, err := h.Runner.Create(ctx, alice, CreateRequest{Executor: "testexec", Spec: spec(t, "fill", map[string]any{"fill_tmp_mb": 48})})
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := h.Runner.Create(ctx, alice, CreateRequest{Executor: "testexec", Spec: spec(t, "bystander", map[string]any{"steps": 2, "fill_tmp_mb": 4})})
	if err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, filler.ID)
	wantStatus(t, got, store.StatusFailed, store.ReasonExecutorFailed)
	if !strings.Contains(got.Message, "no space left on device") {
		t.Errorf("the filler failed with %q, want ENOSPC", got.Message)
	}
	wantStatus(t, waitEnd(t, h, alice, bystander.ID), store.StatusCompleted, store.ReasonNone)
	// Pre-started plugins keep theirs until the host closes.
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 15*time.Second, "no tmpfs of this daemon's plugin run dirs left mounted", func() bool {
		return len(runDirMounts(t, h)) == 0
	})
}

// runDirMounts lists the mount points of h's plugins' run dirs.
func runDirMounts(t *testing.T, h *Host) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(os.TempDir(), plugin.RunDirPrefix(filepath.Join(h.DataDir, datadir.SocketDirName)))
	var mounts []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			mounts = append(mounts, f[4])
		}
	}
	return mounts
}
