package tools

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/taskhost/taskhost/host/config"
)

// A shell.run command's memory, processes and CPU are bounded as a whole by
// cgroup controllers, where the daemon has them:
//
//   - cgroup2: the command's own cgroup (contain.go) gets memory.max,
//     memory.oom.group, pids.max and cpu.max, when the daemon's cgroup
//     has those controllers and may enable them for its children (a
//     systemd unit with Delegate=yes). cgroup2 forbids processes in a
//     cgroup whose children have controllers, so the daemon first moves
//     itself into a leaf of its own, taskhost-daemon.
//   - cgroup1: otherwise, where the memory, pids and cpu hierarchies of
//     cgroup v1 are mounted and the daemon's cgroup in each is writable
//     (a root daemon on a host with hybrid cgroups), the command gets a
//     cgroup of its own in each, which the trampoline joins before it
//     execs the command (confine.Policy.JoinCgroups): a child cannot be
//     started inside a v1 cgroup.
//   - none: only the rlimits bound the command, per process; the host
//     says so once, at WARN.
//
// A command that reaches its memory, process or disk limit is ended at
// once, whole, and its result names the limit.

// Names of the limits in a shell.run result's "limit".
const (
	limitMemory    = "memory"
	limitProcesses = "processes"
	limitDisk      = "disk"
)

// Resource modes, as Registry.Resources names them.
const (
	resourcesCgroup2 = "cgroup2"
	resourcesCgroup1 = "cgroup1"
	resourcesNone    = "rlimits only"
)

// daemonLeaf is the cgroup2 leaf a daemon moves itself into so that its
// own cgroup may enable controllers for its commands' cgroups.
const daemonLeaf = "taskhost-daemon"

// cpuPeriodMicros is the CFS period a command's CPU quota is set in.
const cpuPeriodMicros = 100_000

// limitPoll is how often a running command's counters are read.
const limitPoll = 20 * time.Millisecond

// cgroupLimits are the bounds of one command's cgroups.
type cgroupLimits struct {
	memoryBytes int64
	pids        int
	cpuPercent  int
}

// controllers are the cgroup controllers a command's limits need.
var controllers = []string{"memory", "pids", "cpu"}

// enableControllers2 makes the cgroup2 tree's commands get the controllers:
// the controllers must be available in base, enabled in its
// subtree_control (after moving this process into daemonLeaf if base
// holds processes), and enabled in parent. It reports why not otherwise.
func enableControllers2(base, parent string) error {
	have, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup2 %s: %w", base, err)
	}
	for _, c := range controllers {
		if !slices.Contains(strings.Fields(string(have)), c) {
			return fmt.Errorf("cgroup2 %s offers the controllers %q, not %s (not delegated)", base, strings.TrimSpace(string(have)), c)
		}
	}
	enable := []byte("+memory +pids +cpu")
	if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), enable, 0); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("cgroup2 %s: enable controllers: %w", base, err)
		}
		// "No internal processes": this process lives in base.
		leaf := filepath.Join(base, daemonLeaf)
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup2 %s: %w", leaf, err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0); err != nil {
			return fmt.Errorf("cgroup2: move the daemon into %s: %w", leaf, err)
		}
		if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), enable, 0); err != nil {
			return fmt.Errorf("cgroup2 %s: enable controllers (other processes in it?): %w", base, err)
		}
	}
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroup2 %s: %w", parent, err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), enable, 0); err != nil {
		return fmt.Errorf("cgroup2 %s: enable controllers: %w", parent, err)
	}
	return nil
}

// setLimits2 writes l into a command's cgroup2 directory.
func setLimits2(dir string, l cgroupLimits) error {
	for _, f := range []struct{ name, value string }{
		{"memory.max", strconv.FormatInt(l.memoryBytes, 10)},
		// The whole command, not only the largest process, ends on OOM.
		{"memory.oom.group", "1"},
		{"pids.max", strconv.Itoa(l.pids)},
		{"cpu.max", fmt.Sprintf("%d %d", l.cpuPercent*cpuPeriodMicros/100, cpuPeriodMicros)},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.value), 0); err != nil {
			return fmt.Errorf("cgroup %s: %s: %w", dir, f.name, err)
		}
	}
	// Without swap accounting this file is absent; nothing to bound then.
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	return nil
}

// hit2 names the limit a command's cgroup2 directory says was reached.
func hit2(dir string) string {
	switch {
	case counter(filepath.Join(dir, "memory.events"), "oom_kill") > 0:
		return limitMemory
	case counter(filepath.Join(dir, "pids.events"), "max") > 0:
		return limitProcesses
	}
	return ""
}

// counter reads "key N" from a flat-keyed cgroup file; 0 if absent.
func counter(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// v1Tree is where commands get their cgroups in the memory, pids and cpu
// hierarchies of cgroup v1: <hierarchy>/<the daemon's cgroup there>/taskhost-<pid>.
type v1Tree struct {
	parents map[string]string // controller → parent directory
}

// findV1Tree returns the v1 tree, or why there is none.
func findV1Tree() (*v1Tree, error) {
	mounts, err := v1Mounts()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroups1()
	if err != nil {
		return nil, err
	}
	t := &v1Tree{parents: map[string]string{}}
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

type v1Mount struct{ dir, root string }

// v1Mounts maps each controller of a writable cgroup v1 mount to it.
func v1Mounts() (map[string]v1Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms := map[string]v1Mount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(after) < 3 || after[0] != "cgroup" || strings.HasPrefix(fields[5], "ro") {
			continue
		}
		for opt := range strings.SplitSeq(after[2], ",") {
			if slices.Contains(controllers, opt) {
				if _, seen := ms[opt]; !seen {
					ms[opt] = v1Mount{dir: unescapeMount(fields[4]), root: unescapeMount(fields[3])}
				}
			}
		}
	}
	return ms, sc.Err()
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

// newCgroups makes one command's cgroups, limits set.
func (t *v1Tree) newCgroups(l cgroupLimits) (*v1Cgroups, error) {
	cg := &v1Cgroups{dirs: map[string]string{}}
	for _, c := range controllers {
		parent := t.parents[c]
		var dir string
		for range 2 {
			if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				_ = cg.release()
				return nil, fmt.Errorf("create cgroup %s: %w", parent, err)
			}
			var err error
			dir, err = os.MkdirTemp(parent, "cmd-")
			if errors.Is(err, fs.ErrNotExist) {
				continue // another registry of this process removed the parent just now
			}
			if err != nil {
				_ = cg.release()
				return nil, fmt.Errorf("create command cgroup: %w", err)
			}
			break
		}
		if dir == "" {
			_ = cg.release()
			return nil, fmt.Errorf("create command cgroup under %s: removed while in use", parent)
		}
		cg.dirs[c] = dir
	}
	for _, f := range []struct{ c, name, value string }{
		{"memory", "memory.limit_in_bytes", strconv.FormatInt(l.memoryBytes, 10)},
		{"pids", "pids.max", strconv.Itoa(l.pids)},
		{"cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriodMicros)},
		{"cpu", "cpu.cfs_quota_us", strconv.Itoa(l.cpuPercent * cpuPeriodMicros / 100)},
	} {
		if err := os.WriteFile(filepath.Join(cg.dirs[f.c], f.name), []byte(f.value), 0); err != nil {
			_ = cg.release()
			return nil, fmt.Errorf("cgroup %s: %s: %w", cg.dirs[f.c], f.name, err)
		}
	}
	// With swap accounting, swap too; the file is absent without it.
	_ = os.WriteFile(filepath.Join(cg.dirs["memory"], "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(l.memoryBytes, 10)), 0)
	// v1 has no memory.oom.group: its OOM killer would kill one process
	// and let the rest of the command run on until the watch ends it. With
	// the killer off, a process at the limit waits instead (under_oom),
	// and the watch ends the whole command. Where this cannot be set, the
	// oom_kill counter says it.
	_ = os.WriteFile(filepath.Join(cg.dirs["memory"], "memory.oom_control"), []byte("1"), 0)
	return cg, nil
}

// removeParents removes the taskhost-<pid> directories left empty.
func (t *v1Tree) removeParents() {
	for _, p := range t.parents {
		_ = syscall.Rmdir(p) // EBUSY: another registry of this process still runs commands
	}
}

// sweepStale removes what a daemon killed before it could clean up left
// in its taskhost-<pid> cgroups, killing what still runs there.
func (t *v1Tree) sweepStale() {
	for _, parent := range t.parents {
		base := filepath.Dir(parent)
		entries, err := os.ReadDir(base)
		if err != nil {
			continue
		}
		for _, e := range entries {
			pidText, ok := strings.CutPrefix(e.Name(), "taskhost-")
			pid, err := strconv.Atoi(pidText)
			if !ok || !e.IsDir() || err != nil || pid == os.Getpid() || processAlive(pid) {
				continue
			}
			dir := filepath.Join(base, e.Name())
			cmds, _ := os.ReadDir(dir)
			for _, c := range cmds {
				if c.IsDir() && strings.HasPrefix(c.Name(), "cmd-") {
					_ = removeV1(filepath.Join(dir, c.Name()))
				}
			}
			_ = syscall.Rmdir(dir)
		}
	}
}

// v1Cgroups are one command's cgroups, by controller.
type v1Cgroups struct {
	dirs map[string]string
}

// join lists the directories the trampoline joins.
func (c *v1Cgroups) join() []string {
	var dirs []string
	for _, k := range controllers {
		if d, ok := c.dirs[k]; ok {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// hit names the limit the cgroups say was reached.
func (c *v1Cgroups) hit() string {
	mem := c.dirs["memory"]
	oom := filepath.Join(mem, "memory.oom_control")
	if counter(oom, "under_oom") > 0 || counter(oom, "oom_kill") > 0 {
		return limitMemory
	}
	if _, err := os.Stat(filepath.Join(mem, "memory.oom_control")); err == nil && !hasOOMKillCounter(mem) {
		// Before Linux 4.13 there is no oom_kill counter: any time the
		// limit was hit is taken as the cause.
		if b, err := os.ReadFile(filepath.Join(mem, "memory.failcnt")); err == nil && strings.TrimSpace(string(b)) != "0" {
			return limitMemory
		}
	}
	if counter(filepath.Join(c.dirs["pids"], "pids.events"), "max") > 0 {
		return limitProcesses
	}
	return ""
}

func hasOOMKillCounter(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "memory.oom_control"))
	return err == nil && bytes.Contains(b, []byte("oom_kill "))
}

// kill sends SIGKILL to every process in the cgroups (without cgroup2
// containment, the only list of them there is).
func (c *v1Cgroups) kill() {
	for _, pid := range readPIDs(filepath.Join(c.dirs["pids"], "cgroup.procs")) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// release removes the cgroups, killing what is left in them.
func (c *v1Cgroups) release() error {
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
	deadline := time.Now().Add(cgroupEmptyWait)
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

// nprocHeadroom lifts RLIMIT_NPROC above a command's pids limit: the
// kernel checks the rlimit first, and a fork refused by the pids
// controller is the one whose count says why (limit "processes").
const nprocHeadroom = 16

// setupResources finds how this registry's commands are bounded (see the
// comment at the top of this file) and whether their writes are bounded by
// a filesystem (disk.go), and says once, at WARN, what is missing.
func (r *Registry) setupResources(pol config.Tool) {
	lim := cgroupLimits{memoryBytes: int64(pol.CommandMemoryMB) << 20, pids: pol.MaxProcesses, cpuPercent: pol.CommandCPUPercent}
	var why []string
	if r.cgroups != nil {
		err := enableControllers2(filepath.Dir(r.cgroups.parent), r.cgroups.parent)
		if err == nil {
			r.cgroups.limits, r.resources = &lim, resourcesCgroup2
		} else {
			why = append(why, err.Error())
		}
	} else {
		why = append(why, "no writable cgroup2 mount (or Linux before 5.7)")
	}
	if r.resources == "" && r.confine != nil {
		// A v1 cgroup is joined by the trampoline: only a confined command can.
		t, err := findV1Tree()
		if err == nil {
			t.sweepStale()
			r.v1, r.resources = t, resourcesCgroup1
		} else {
			why = append(why, err.Error())
		}
	}
	if r.resources == "" {
		r.resources = resourcesNone
		r.log.Warn("shell.run commands have no cgroup limits: their memory, processes and CPU are bounded per process by rlimits only (docs/security.md)",
			"why", strings.Join(why, "; "))
	} else if r.confine != nil {
		r.confine.rlimits.NProc += nprocHeadroom
	}
	r.limits = lim
	if r.confine == nil {
		r.diskWhy = "commands run unconfined"
	} else if err := diskSupported(); err != nil {
		r.diskWhy = err.Error()
	}
	if r.diskWhy != "" {
		r.log.Warn("shell.run commands write their workspace directly: its size is bounded by the tools' checks and max_file_mb only (docs/security.md)",
			"why", r.diskWhy)
	}
}

// Resources says how shell.run commands' memory, processes, CPU and
// writes are bounded here, e.g. "cgroup1 (memory 1024 MiB, 256
// processes, 100% CPU), disk: workspace overlay (64 MiB)".
func (r *Registry) Resources() string {
	s := r.resources
	if r.resources != resourcesNone {
		s += fmt.Sprintf(" (memory %d MiB, %d processes, %d%% CPU)", r.limits.memoryBytes>>20, r.limits.pids, r.limits.cpuPercent)
	}
	if r.diskWhy == "" {
		return s + fmt.Sprintf(", disk: workspace overlay (%d MiB)", MaxWorkspaceBytes>>20)
	}
	return s + ", disk: write checks only (" + r.diskWhy + ")"
}

// limitWatch ends a command the moment it reaches a limit, and names it.
type limitWatch struct {
	box  container
	v1   *v1Cgroups     // nil: none
	disk *workspaceDisk // nil: none
	stop chan struct{}
	done chan string
}

// watchLimits polls the command's counters until stopped; on the first
// limit reached it kills the command's container.
func watchLimits(box container, v1 *v1Cgroups, disk *workspaceDisk) *limitWatch {
	w := &limitWatch{box: box, v1: v1, disk: disk, stop: make(chan struct{}), done: make(chan string, 1)}
	go func() {
		t := time.NewTicker(limitPoll)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				w.done <- ""
				return
			case <-t.C:
				if hit := w.hit(); hit != "" {
					box.kill()
					if v1 != nil {
						v1.kill()
					}
					w.done <- hit
					return
				}
			}
		}
	}()
	return w
}

// hit names the limit the command reached, or "".
func (w *limitWatch) hit() string {
	if h := w.box.hit(); h != "" {
		return h
	}
	if w.v1 != nil {
		if h := w.v1.hit(); h != "" {
			return h
		}
	}
	if w.disk != nil && w.disk.full() {
		return limitDisk
	}
	return ""
}

// end stops the watch and returns the limit the command reached, if any:
// the one that ended it, or one its counters show now. Called before the
// container is released.
func (w *limitWatch) end() string {
	close(w.stop)
	if h := <-w.done; h != "" {
		return h
	}
	return w.hit()
}
