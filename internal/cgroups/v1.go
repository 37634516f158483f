package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Tree1 is where process trees get their cgroups in the memory, pids and
// cpu hierarchies of cgroup v1: <hierarchy>/<the daemon's cgroup
// there>/taskhost-<pid>.
type Tree1 struct {
	parents map[string]string // controller → parent directory
}

// FindTree1 returns the v1 tree, or why there is none.
func FindTree1() (*Tree1, error) {
	mounts, err := v1Mounts()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroups1()
	if err != nil {
		return nil, err
	}
	t := &Tree1{parents: map[string]string{}}
	for _, c := range controllers {
		m, ok := mounts[c]
		if !ok {
			return nil, fmt.Errorf("no cgroup v1 %s hierarchy is mounted", c)
		}
		path, ok := own[c]
		if !ok {
			return nil, fmt.Errorf("this process is in no cgroup v1 %s cgroup", c)
		}
		rel, ok := strings.CutPrefix(path, m.root)
		if !ok {
			return nil, fmt.Errorf("cgroup v1 %s: this process's cgroup %s is outside the mount's root %s", c, path, m.root)
		}
		base := filepath.Join(m.dir, rel)
		if err := syscall.Access(base, 0x2 /* W_OK */); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %s is not writable: %w", c, base, err)
		}
		t.parents[c] = filepath.Join(base, "taskhost-"+strconv.Itoa(os.Getpid()))
	}
	return t, nil
}

// Parents maps each controller to the tree's taskhost-<pid> directory in
// its hierarchy.
func (t *Tree1) Parents() map[string]string { return maps.Clone(t.parents) }

type v1Mount struct{ dir, root string }

// v1Mounts maps each controller of a writable cgroup v1 mount to it.
func v1Mounts() (map[string]v1Mount, error) {
	ms := map[string]v1Mount{}
	err := scanLines("/proc/self/mountinfo", func(line string) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(line, " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(after) < 3 || after[0] != "cgroup" || strings.HasPrefix(fields[5], "ro") {
			return
		}
		for opt := range strings.SplitSeq(after[2], ",") {
			if slices.Contains(controllers, opt) {
				if _, seen := ms[opt]; !seen {
					ms[opt] = v1Mount{dir: unescapeMount(fields[4]), root: unescapeMount(fields[3])}
				}
			}
		}
	})
	return ms, err
}

// ownCgroups1 maps each v1 controller to this process's cgroup in it.
func ownCgroups1() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	own := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own, nil
}

// New makes one process tree's cgroups, named prefix+random, limits set.
func (t *Tree1) New(prefix string, l Limits) (*Cgroups1, error) {
	cg := &Cgroups1{dirs: map[string]string{}}
	for _, c := range controllers {
		parent := t.parents[c]
		var dir string
		for range 2 {
			if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				_ = cg.Release()
				return nil, fmt.Errorf("create cgroup %s: %w", parent, err)
			}
			var err error
			dir, err = os.MkdirTemp(parent, prefix)
			if errors.Is(err, fs.ErrNotExist) {
				continue // another user of this tree removed the parent just now
			}
			if err != nil {
				_ = cg.Release()
				return nil, fmt.Errorf("create cgroup: %w", err)
			}
			break
		}
		if dir == "" {
			_ = cg.Release()
			return nil, fmt.Errorf("create cgroup under %s: removed while in use", parent)
		}
		cg.dirs[c] = dir
	}
	for _, f := range []struct{ c, name, value string }{
		{"memory", "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)},
		{"pids", "pids.max", strconv.Itoa(l.Pids)},
		{"cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriodMicros)},
		{"cpu", "cpu.cfs_quota_us", strconv.Itoa(l.CPUPercent * cpuPeriodMicros / 100)},
	} {
		if err := os.WriteFile(filepath.Join(cg.dirs[f.c], f.name), []byte(f.value), 0); err != nil {
			_ = cg.Release()
			return nil, fmt.Errorf("cgroup %s: %s: %w", cg.dirs[f.c], f.name, err)
		}
	}
	// With swap accounting, swap too; the file is absent without it.
	_ = os.WriteFile(filepath.Join(cg.dirs["memory"], "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(l.MemoryBytes, 10)), 0)
	// v1 has no memory.oom.group: its OOM killer would kill one process
	// and let the rest of the tree run on until the watch ends it. With
	// the killer off, a process at the limit waits instead (under_oom),
	// and the watch ends the whole tree. Where this cannot be set, the
	// oom_kill counter says it.
	_ = os.WriteFile(filepath.Join(cg.dirs["memory"], "memory.oom_control"), []byte("1"), 0)
	return cg, nil
}

// RemoveParents removes the taskhost-<pid> directories left empty.
func (t *Tree1) RemoveParents() {
	for _, p := range t.parents {
		_ = syscall.Rmdir(p) // EBUSY: another user of this process's tree still runs something
	}
}

// SweepStale removes what a daemon killed before it could clean up left
// in its taskhost-<pid> cgroups, killing what still runs there.
func (t *Tree1) SweepStale() {
	for _, parent := range t.parents {
		for _, dir := range staleTrees(filepath.Dir(parent)) {
			for _, c := range children(dir) {
				_ = removeV1(c)
			}
			_ = syscall.Rmdir(dir)
		}
	}
}

// Cgroups1 are one process tree's cgroups, by controller.
type Cgroups1 struct {
	dirs map[string]string
}

// Join lists the directories the trampoline joins.
func (c *Cgroups1) Join() []string {
	var dirs []string
	for _, k := range controllers {
		if d, ok := c.dirs[k]; ok {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Dir is the cgroup of controller ("memory", "pids", "cpu").
func (c *Cgroups1) Dir(controller string) string { return c.dirs[controller] }

// Hit names the limit the cgroups say was reached, or "". A watch calls it
// every poll for every running plugin, so it reads each file once:
// memory.oom_control, memory.failcnt only on a kernel without an oom_kill
// counter, and pids.events.
func (c *Cgroups1) Hit() string {
	mem := c.dirs["memory"]
	if b, err := os.ReadFile(filepath.Join(mem, "memory.oom_control")); err == nil {
		under, _ := flatKey(b, "under_oom")
		kills, counted := flatKey(b, "oom_kill")
		if under > 0 || kills > 0 {
			return LimitMemory
		}
		if !counted {
			// Before Linux 4.13 there is no oom_kill counter: any time the
			// limit was hit is taken as the cause.
			if b, err := os.ReadFile(filepath.Join(mem, "memory.failcnt")); err == nil && strings.TrimSpace(string(b)) != "0" {
				return LimitMemory
			}
		}
	}
	if counter(filepath.Join(c.dirs["pids"], "pids.events"), "max") > 0 {
		return LimitProcesses
	}
	return ""
}

// Kill sends SIGKILL to every process in the cgroups (without cgroup2
// containment, the only list of them there is).
func (c *Cgroups1) Kill() {
	for _, pid := range readPIDs(filepath.Join(c.dirs["pids"], "cgroup.procs")) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Release removes the cgroups, killing what is left in them.
func (c *Cgroups1) Release() error {
	var errs []error
	for _, k := range controllers {
		if d, ok := c.dirs[k]; ok {
			if err := removeV1(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeV1 kills the processes of a v1 cgroup until it is empty, then
// removes it.
func removeV1(dir string) error {
	deadline := time.Now().Add(EmptyWait)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		for _, pid := range readPIDs(filepath.Join(dir, "cgroup.procs")) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}
