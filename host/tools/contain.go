package tools

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A shell.run command must not leave anything running: not its background
// jobs, and not a process that left its process group and session with
// setsid. A process group alone does not hold the second, so each command
// runs in a cgroup v2 of its own, which no process can leave without write
// access to the cgroup tree (a confined command has none), and whose
// cgroup.kill reaches every member at once. Where no cgroup2 is writable,
// the command runs as a session of its own, and the kill reaches the
// session, its process group and their descendants found through /proc —
// which misses a process that called setsid and whose parent is gone
// already; docs/security.md says so.

// cgroupEmptyWait bounds how long removing a command's cgroup waits for its
// killed processes to leave it.
const cgroupEmptyWait = 5 * time.Second

// container holds the processes of one command.
type container interface {
	// setup prepares attr so that the child starts inside; called once,
	// before Start.
	setup(attr *syscall.SysProcAttr)
	// started is called after Start with the child's pid, or with 0 if
	// Start failed.
	started(pid int)
	// kill sends SIGKILL to every process inside. It may be called any
	// number of times.
	kill()
	// release kills what is left and frees the container; the container is
	// not used again.
	release() error
	// hit names the limit (limitMemory, limitProcesses) its controllers
	// say the command reached, or "": it has none, or none was reached.
	// Read before release.
	hit() string
}

// cgroupTree is where commands' cgroups are made: <the daemon's own cgroup
// under a writable cgroup2 mount>/taskhost-<pid>.
type cgroupTree struct {
	parent string
	// limits, when set, go into each command's cgroup: the tree has the
	// memory, pids and cpu controllers (resources.go).
	limits *cgroupLimits
}

// findCgroupTree returns the cgroup tree of this process, or nil if no
// cgroup2 is mounted or its own cgroup there is not writable. It creates
// nothing; the parent directory is made on first use.
func findCgroupTree() *cgroupTree {
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
	own := ownCgroup()
	if own == "" {
		return nil
	}
	if filepath.Base(own) == daemonLeaf {
		// An earlier registry of this process moved it there to enable
		// controllers (resources.go): the tree is its parent's.
		own = filepath.Dir(own)
	}
	base := filepath.Join(mount, own)
	if syscall.Access(base, 0x2 /* W_OK */) != nil {
		return nil
	}
	// Controllers enabled below base would make it an inner node that may
	// not hold processes; the daemon lives there, so it must stay a leaf
	// for them. Creating children without controllers is always allowed.
	return &cgroupTree{parent: filepath.Join(base, "taskhost-"+strconv.Itoa(os.Getpid()))}
}

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor.
func kernelAtLeast(major, minor int) bool {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return releaseAtLeast(b.String(), major, minor)
}

// releaseAtLeast compares a release string such as "6.18.44-fc-v1045".
func releaseAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minText := parts[1]
	if i := strings.IndexFunc(minText, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minText = minText[:i]
	}
	mnr, err2 := strconv.Atoi(minText)
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || maj == major && mnr >= minor
}

// cgroup2Mount returns the first writable cgroup2 mount point.
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[2] != "cgroup2" {
			continue
		}
		opts := strings.Split(fields[3], ",")
		if len(opts) > 0 && opts[0] == "ro" {
			continue
		}
		return unescapeMount(fields[1])
	}
	return ""
}

// unescapeMount undoes the octal escapes of /proc/self/mounts (\040 for a
// space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup returns this process's cgroup v2 path ("0::/path").
func ownCgroup() string {
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

// newCgroup makes the cgroup of one command.
func (t *cgroupTree) newCgroup() (*cgroupContainer, error) {
	for range 2 {
		err := os.Mkdir(t.parent, 0o755)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create cgroup %s: %w", t.parent, err)
		}
		if err == nil && t.limits != nil {
			// Made again after a Close removed it: its children need the
			// controllers.
			if err := os.WriteFile(filepath.Join(t.parent, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0); err != nil {
				return nil, fmt.Errorf("cgroup %s: enable controllers: %w", t.parent, err)
			}
		}
		dir, err := os.MkdirTemp(t.parent, "cmd-")
		if errors.Is(err, fs.ErrNotExist) {
			continue // another registry of this process removed the parent just now
		}
		if err != nil {
			return nil, fmt.Errorf("create command cgroup: %w", err)
		}
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			_ = syscall.Rmdir(dir)
			return nil, fmt.Errorf("open command cgroup: %w", err)
		}
		c := &cgroupContainer{dir: dir, fd: fd, limited: t.limits != nil}
		if t.limits != nil {
			if err := setLimits2(dir, *t.limits); err != nil {
				_ = c.release()
				return nil, err
			}
		}
		return c, nil
	}
	return nil, fmt.Errorf("create command cgroup under %s: removed while in use", t.parent)
}

// removeParent removes taskhost-<pid> if no command cgroup is left in it.
func (t *cgroupTree) removeParent() {
	_ = syscall.Rmdir(t.parent) // EBUSY: another registry of this process still runs commands
}

// sweepStale kills and removes what a previous daemon, killed before it
// could clean up, left in its taskhost-<pid> cgroups: the processes of its
// commands outlive it (only the shell gets a parent-death signal). Trees of
// a process that still runs are left alone.
func (t *cgroupTree) sweepStale() {
	base := filepath.Dir(t.parent)
	entries, err := os.ReadDir(base)
	if err != nil {
		return
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
				cg := &cgroupContainer{dir: filepath.Join(dir, c.Name()), fd: -1}
				_ = cg.release()
			}
		}
		_ = syscall.Rmdir(dir)
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// cgroupContainer is one command's cgroup.
type cgroupContainer struct {
	dir     string
	fd      int  // open until the child started
	limited bool // it has controllers and limits
}

func (c *cgroupContainer) hit() string {
	if !c.limited {
		return ""
	}
	return hit2(c.dir)
}

func (c *cgroupContainer) setup(attr *syscall.SysProcAttr) {
	attr.UseCgroupFD, attr.CgroupFD = true, c.fd
	// Its own group too, for a kill of the group when the cgroup's own
	// kill is not there.
	attr.Setpgid = true
}

func (c *cgroupContainer) started(int) {
	if c.fd >= 0 {
		syscall.Close(c.fd)
		c.fd = -1
	}
}

func (c *cgroupContainer) kill() {
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

// release kills every member, waits for the cgroup to be empty, and
// removes it.
func (c *cgroupContainer) release() error {
	c.started(0)
	c.kill()
	deadline := time.Now().Add(cgroupEmptyWait)
	for populated(c.dir) {
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes still in it %s after the kill", c.dir, cgroupEmptyWait)
		}
		c.kill()
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

func readPIDs(file string) []int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sessionContainer is the fallback without a writable cgroup2: the
// command is a session (and process group) of its own.
type sessionContainer struct {
	sid int
}

func (s *sessionContainer) setup(attr *syscall.SysProcAttr) {
	attr.Setsid = true
}

func (s *sessionContainer) started(pid int) { s.sid = pid }

// kill stops every process whose session or process group is the
// command's, and every descendant of one, then kills them all. The list is
// read from /proc while their parents still live (a killed parent's
// children are handed to init at once, and are no longer found as its
// descendants), and read again until it no longer grows: a stopped process
// cannot fork, so a fork racing the first reading is caught by the next.
func (s *sessionContainer) kill() {
	if s.sid <= 0 {
		return
	}
	found := map[int]bool{}
	for range 20 {
		grew := false
		for _, pid := range sessionMembers(s.sid) {
			if !found[pid] {
				found[pid], grew = true, true
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
		if !grew {
			break
		}
	}
	_ = syscall.Kill(-s.sid, syscall.SIGKILL)
	for pid := range found {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func (s *sessionContainer) release() error {
	s.kill()
	return nil
}

func (s *sessionContainer) hit() string { return "" }

// sessionMembers lists the live processes whose session or process group
// is sid, and their descendants.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	type proc struct{ ppid, pgid, sid int }
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold anything; the fields
		// after its last ')' are: state ppid pgrp session ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		sess, _ := strconv.Atoi(f[3])
		procs[pid] = proc{ppid, pgid, sess}
	}
	in := map[int]bool{}
	for pid, p := range procs {
		if p.sid == sid || p.pgid == sid {
			in[pid] = true
		}
	}
	// Descendants: a process whose parent is in; repeat until stable.
	for grew := true; grew; {
		grew = false
		for pid, p := range procs {
			if !in[pid] && in[p.ppid] {
				in[pid], grew = true, true
			}
		}
	}
	pids := make([]int, 0, len(in))
	for pid := range in {
		pids = append(pids, pid)
	}
	return pids
}
