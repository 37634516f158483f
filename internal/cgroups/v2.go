package cgroups

import (
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
)

// Tree2 is where process trees get their cgroup2 cgroups: <the daemon's
// own cgroup under a writable cgroup2 mount>/taskhost-<pid>.
type Tree2 struct {
	parent string
	// limited: the tree has the memory, pids and cpu controllers
	// (EnableControllers), and the parent, when made again, enables them
	// for its children.
	limited bool
}

// FindTree2 returns the cgroup2 tree of this process, or nil if no cgroup2
// is mounted writable or its own cgroup there is not writable. It creates
// nothing; the parent directory is made on first use.
func FindTree2() *Tree2 {
	// Starting a child inside a cgroup (clone3 with CLONE_INTO_CGROUP) came
	// with Linux 5.7; before it a child would have to move itself, after
	// its first instructions.
	if !kernelAtLeast(5, 7) {
		return nil
	}
	mount := cgroup2Mount()
	if mount == "" {
		return nil
	}
	own := ownCgroup2()
	if own == "" {
		return nil
	}
	if filepath.Base(own) == DaemonLeaf {
		// An earlier tree of this process moved it there to enable
		// controllers: the tree is its parent's.
		own = filepath.Dir(own)
	}
	base := filepath.Join(mount, own)
	if syscall.Access(base, 0x2 /* W_OK */) != nil {
		return nil
	}
	// Controllers enabled below base would make it an inner node that may
	// not hold processes; the daemon lives there, so it must stay a leaf
	// for them. Creating children without controllers is always allowed.
	return &Tree2{parent: filepath.Join(base, "taskhost-"+strconv.Itoa(os.Getpid()))}
}

// Parent is the tree's taskhost-<pid> directory.
func (t *Tree2) Parent() string { return t.parent }

// cgroup2Mount returns the first writable cgroup2 mount point.
func cgroup2Mount() string {
	var mount string
	_ = scanLines("/proc/self/mounts", func(line string) {
		fields := strings.Fields(line)
		if mount != "" || len(fields) < 4 || fields[2] != "cgroup2" {
			return
		}
		if opts := strings.Split(fields[3], ","); len(opts) > 0 && opts[0] == "ro" {
			return
		}
		mount = unescapeMount(fields[1])
	})
	return mount
}

// ownCgroup2 returns this process's cgroup v2 path ("0::/path").
func ownCgroup2() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") {
			return p
		}
	}
	return ""
}

// EnableControllers gives the tree's cgroups the memory, pids and cpu
// controllers: they must be available in the daemon's cgroup, enabled in
// its subtree_control (after moving this process into DaemonLeaf if it
// holds processes), and enabled in the parent. It reports why not
// otherwise, and the tree's cgroups then bound nothing.
func (t *Tree2) EnableControllers() error {
	if err := enableControllers2(filepath.Dir(t.parent), t.parent); err != nil {
		return err
	}
	t.limited = true
	return nil
}

// Limited says whether EnableControllers succeeded.
func (t *Tree2) Limited() bool { return t.limited }

var enableAll = []byte("+memory +pids +cpu")

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
	if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), enableAll, 0); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("cgroup2 %s: enable controllers: %w", base, err)
		}
		// "No internal processes": this process lives in base.
		leaf := filepath.Join(base, DaemonLeaf)
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup2 %s: %w", leaf, err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0); err != nil {
			return fmt.Errorf("cgroup2: move the daemon into %s: %w", leaf, err)
		}
		if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), enableAll, 0); err != nil {
			return fmt.Errorf("cgroup2 %s: enable controllers (other processes in it?): %w", base, err)
		}
	}
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroup2 %s: %w", parent, err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), enableAll, 0); err != nil {
		return fmt.Errorf("cgroup2 %s: enable controllers: %w", parent, err)
	}
	return nil
}

// setLimits2 writes l into a cgroup2 directory.
func setLimits2(dir string, l Limits) error {
	for _, f := range []struct{ name, value string }{
		{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)},
		// The whole tree, not only its largest process, ends on OOM.
		{"memory.oom.group", "1"},
		{"pids.max", strconv.Itoa(l.Pids)},
		{"cpu.max", fmt.Sprintf("%d %d", l.CPUPercent*cpuPeriodMicros/100, cpuPeriodMicros)},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.value), 0); err != nil {
			return fmt.Errorf("cgroup %s: %s: %w", dir, f.name, err)
		}
	}
	// Without swap accounting this file is absent; nothing to bound then.
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	return nil
}

// hit2 names the limit a cgroup2 directory says was reached.
func hit2(dir string) string {
	switch {
	case counter(filepath.Join(dir, "memory.events"), "oom_kill") > 0:
		return LimitMemory
	case counter(filepath.Join(dir, "pids.events"), "max") > 0:
		return LimitProcesses
	}
	return ""
}

// New makes one process tree's cgroup, named prefix+random, with limits l
// (nil: none; the tree must be Limited otherwise).
func (t *Tree2) New(prefix string, l *Limits) (*Cgroup2, error) {
	for range 2 {
		err := os.Mkdir(t.parent, 0o755)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create cgroup %s: %w", t.parent, err)
		}
		if err == nil && t.limited {
			// Made again after a Close removed it: its children need the
			// controllers.
			if err := os.WriteFile(filepath.Join(t.parent, "cgroup.subtree_control"), enableAll, 0); err != nil {
				return nil, fmt.Errorf("cgroup %s: enable controllers: %w", t.parent, err)
			}
		}
		dir, err := os.MkdirTemp(t.parent, prefix)
		if errors.Is(err, fs.ErrNotExist) {
			continue // another user of this tree removed the parent just now
		}
		if err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			_ = syscall.Rmdir(dir)
			return nil, fmt.Errorf("open cgroup: %w", err)
		}
		c := &Cgroup2{dir: dir, fd: fd, limited: l != nil}
		if l != nil {
			if err := setLimits2(dir, *l); err != nil {
				_ = c.Release()
				return nil, err
			}
		}
		return c, nil
	}
	return nil, fmt.Errorf("create cgroup under %s: removed while in use", t.parent)
}

// RemoveParent removes taskhost-<pid> if no cgroup is left in it.
func (t *Tree2) RemoveParent() {
	_ = syscall.Rmdir(t.parent) // EBUSY: another user of this process's tree still runs something
}

// SweepStale kills and removes what a previous daemon, killed before it
// could clean up, left in its taskhost-<pid> cgroups: processes started
// there outlive it unless their parent-death signal got them. Trees of a
// process that still runs are left alone.
func (t *Tree2) SweepStale() {
	for _, dir := range staleTrees(filepath.Dir(t.parent)) {
		for _, c := range children(dir) {
			_ = (&Cgroup2{dir: c, fd: -1}).Release()
		}
		_ = syscall.Rmdir(dir)
	}
}

// Cgroup2 is one process tree's cgroup2 cgroup.
type Cgroup2 struct {
	dir     string
	fd      int  // open until the child started
	limited bool // it has controllers and limits
}

// Dir is the cgroup's directory.
func (c *Cgroup2) Dir() string { return c.dir }

// Hit names the limit its controllers say was reached, or "".
func (c *Cgroup2) Hit() string {
	if !c.limited {
		return ""
	}
	return hit2(c.dir)
}

// Setup makes the child attr starts begin inside the cgroup.
func (c *Cgroup2) Setup(attr *syscall.SysProcAttr) {
	attr.UseCgroupFD, attr.CgroupFD = true, c.fd
}

// Started closes the descriptor Setup handed over; the child has started,
// or failed to.
func (c *Cgroup2) Started() {
	if c.fd >= 0 {
		syscall.Close(c.fd)
		c.fd = -1
	}
}

// Kill sends SIGKILL to every process in the cgroup. It may be called any
// number of times.
func (c *Cgroup2) Kill() {
	err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
	if err == nil {
		return
	}
	// Before Linux 5.14 there is no cgroup.kill: freeze, so nothing can
	// fork while its members are listed, kill each, thaw so that they
	// die.
	freeze := filepath.Join(c.dir, "cgroup.freeze")
	frozen := os.WriteFile(freeze, []byte("1"), 0) == nil
	for range 100 {
		pids := readPIDs(filepath.Join(c.dir, "cgroup.procs"))
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if frozen {
			break
		}
	}
	if frozen {
		_ = os.WriteFile(freeze, []byte("0"), 0)
	}
}

// Release kills every member, waits for the cgroup to be empty, and
// removes it.
func (c *Cgroup2) Release() error {
	c.Started()
	c.Kill()
	deadline := time.Now().Add(EmptyWait)
	for populated(c.dir) {
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes still in it %s after the kill", c.dir, EmptyWait)
		}
		c.Kill()
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Rmdir(c.dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", c.dir, err)
	}
	return nil
}

// populated reads cgroup.events; a cgroup that cannot be read is taken as
// empty, as nothing more can be done with it.
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("populated 1"))
}
