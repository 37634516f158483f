// Package cgroups gives each untrusted process tree of a daemon — a
// shell.run command, an executor plugin with everything it starts — cgroups
// of its own, with memory, pids and CPU limits, where the daemon has them:
//
//   - cgroup2: a cgroup of its own under <the daemon's cgroup on the first
//     writable cgroup2 mount>/taskhost-<pid>, which the child is started
//     in (clone3 CLONE_INTO_CGROUP) and which cgroup.kill ends whole. With
//     the memory, pids and cpu controllers delegated (a systemd unit with
//     Delegate=yes) it gets memory.max, memory.oom.group, pids.max and
//     cpu.max; cgroup2 forbids processes in a cgroup whose children have
//     controllers, so the daemon first moves itself into a leaf of its
//     own, DaemonLeaf. Without them the cgroup still holds the tree
//     together (no setsid escapes it) but bounds nothing.
//   - cgroup1: otherwise, where the memory, pids and cpu hierarchies of
//     cgroup v1 are mounted and the daemon's cgroup in each is writable (a
//     root daemon on a host with hybrid cgroups), a cgroup of its own in
//     each, which the confine trampoline joins before it execs the target
//     (confine.Policy.JoinCgroups): a child cannot be started inside a v1
//     cgroup.
//   - none: the caller's rlimits alone; it says so once, at WARN.
//
// A daemon killed before it could remove its cgroups leaves them, with
// whatever still runs there; the next daemon on the machine kills that and
// removes them when it finds its trees (Find).
package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Names of the limits Hit reports.
const (
	LimitMemory    = "memory"
	LimitProcesses = "processes"
)

// Modes, as Set.Mode names them.
const (
	ModeCgroup2 = "cgroup2"
	ModeCgroup1 = "cgroup1"
	ModeNone    = "rlimits only"
)

// DaemonLeaf is the cgroup2 leaf a daemon moves itself into so that its
// own cgroup may enable controllers for its children's cgroups.
const DaemonLeaf = "taskhost-daemon"

// cpuPeriodMicros is the CFS period a CPU quota is set in.
const cpuPeriodMicros = 100_000

// EmptyWait bounds how long removing a cgroup waits for its killed
// processes to leave it.
const EmptyWait = 5 * time.Second

// NProcHeadroom lifts RLIMIT_NPROC above a pids limit: the kernel checks
// the rlimit first, and a fork refused by the pids controller is the one
// whose count says why (LimitProcesses).
const NProcHeadroom = 16

// controllers are the cgroup controllers the limits need.
var controllers = []string{"memory", "pids", "cpu"}

// Limits are the bounds of one process tree's cgroups.
type Limits struct {
	MemoryBytes int64
	Pids        int
	CPUPercent  int // of one CPU
}

// String reads e.g. "memory 1024 MiB, 256 processes, 100% CPU".
func (l Limits) String() string {
	return fmt.Sprintf("memory %d MiB, %d processes, %d%% CPU", l.MemoryBytes>>20, l.Pids, l.CPUPercent)
}

// Set is how a daemon's process trees get their cgroups here.
type Set struct {
	// Mode is ModeCgroup2, ModeCgroup1 or ModeNone.
	Mode string
	// V2 is the cgroup2 tree each process tree is contained in (its
	// cgroup.kill ends it whole), with limits in ModeCgroup2; nil where no
	// cgroup2 is writable.
	V2 *Tree2
	// V1 is the cgroup v1 tree of ModeCgroup1; nil otherwise.
	V1 *Tree1
	// Why says, in ModeNone, why neither tree gives limits.
	Why string
}

// Find finds this process's cgroup trees, removes what dead daemons left
// in them (killing what still runs there) and decides the mode. joinV1
// says the processes start through the confine trampoline, which alone
// can put them in a v1 cgroup.
func Find(joinV1 bool) Set {
	s := Set{V2: FindTree2()}
	var why []string
	if s.V2 != nil {
		s.V2.SweepStale()
		if err := s.V2.EnableControllers(); err == nil {
			s.Mode = ModeCgroup2
		} else {
			why = append(why, err.Error())
		}
	} else {
		why = append(why, "no writable cgroup2 mount (or Linux before 5.7)")
	}
	if s.Mode == "" && joinV1 {
		t, err := FindTree1()
		if err == nil {
			t.SweepStale()
			s.V1, s.Mode = t, ModeCgroup1
		} else {
			why = append(why, err.Error())
		}
	}
	if s.Mode == "" {
		s.Mode, s.Why = ModeNone, strings.Join(why, "; ")
	}
	return s
}

// Limited says whether the cgroups bound memory, processes and CPU.
func (s Set) Limited() bool { return s.Mode == ModeCgroup2 || s.Mode == ModeCgroup1 }

// New makes the cgroups of one process tree, named prefix+random in each
// tree, with limits l where the mode has them.
func (s Set) New(prefix string, l Limits) (*Box, error) {
	b := &Box{}
	var err error
	if s.V2 != nil {
		var lim *Limits
		if s.Mode == ModeCgroup2 {
			lim = &l
		}
		if b.V2, err = s.V2.New(prefix, lim); err != nil {
			return nil, err
		}
	}
	if s.V1 != nil {
		if b.V1, err = s.V1.New(prefix, l); err != nil {
			_ = b.Release()
			return nil, err
		}
	}
	return b, nil
}

// Close removes the daemon's own taskhost-<pid> parents once nothing of
// it is left in them.
func (s Set) Close() {
	if s.V2 != nil {
		s.V2.RemoveParent()
	}
	if s.V1 != nil {
		s.V1.RemoveParents()
	}
}

// Box is one process tree's cgroups: its cgroup2 cgroup and its v1 ones,
// either may be nil.
type Box struct {
	V2 *Cgroup2
	V1 *Cgroups1
}

// Setup makes the child that attr starts begin inside the cgroup2 cgroup.
func (b *Box) Setup(attr *syscall.SysProcAttr) {
	if b.V2 != nil {
		b.V2.Setup(attr)
	}
}

// Started is called once the child started, or failed to.
func (b *Box) Started() {
	if b.V2 != nil {
		b.V2.Started()
	}
}

// Join lists the v1 directories the trampoline joins.
func (b *Box) Join() []string {
	if b.V1 == nil {
		return nil
	}
	return b.V1.Join()
}

// Hit names the limit the cgroups say was reached, or "".
func (b *Box) Hit() string {
	if b.V2 != nil {
		if h := b.V2.Hit(); h != "" {
			return h
		}
	}
	if b.V1 != nil {
		return b.V1.Hit()
	}
	return ""
}

// Kill sends SIGKILL to every process in the cgroups.
func (b *Box) Kill() {
	if b.V2 != nil {
		b.V2.Kill()
	}
	if b.V1 != nil {
		b.V1.Kill()
	}
}

// Holds reports whether the box has a cgroup at all: one that, removed,
// proves every process born in it gone (a removal succeeds only once a
// cgroup is empty).
func (b *Box) Holds() bool {
	return b != nil && (b.V2 != nil || (b.V1 != nil && len(b.V1.dirs) > 0))
}

// Release kills what is left and removes the cgroups.
func (b *Box) Release() error {
	var errs []error
	if b.V2 != nil {
		errs = append(errs, b.V2.Release())
	}
	if b.V1 != nil {
		errs = append(errs, b.V1.Release())
	}
	return errors.Join(errs...)
}

// Watch ends a process tree the moment it reaches a limit, and names it.
type Watch struct {
	hit  func() string
	stop chan struct{}
	done chan string
}

// NewWatch polls hit every poll until End; on the first limit it names,
// it calls kill and remembers the limit.
//
// The polls fall on the multiples of poll (time.Truncate's), the same
// instants for every watch of that period: a daemon with many plugins
// wakes once a period for all their watches rather than once for each.
func NewWatch(poll time.Duration, hit func() string, kill func()) *Watch {
	w := &Watch{hit: hit, stop: make(chan struct{}), done: make(chan string, 1)}
	go func() {
		t := time.NewTimer(untilNext(time.Now(), poll))
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				w.done <- ""
				return
			case now := <-t.C:
				if h := hit(); h != "" {
					kill()
					w.done <- h
					return
				}
				t.Reset(untilNext(now, poll))
			}
		}
	}()
	return w
}

// untilNext is the time from now to the next multiple of period.
func untilNext(now time.Time, period time.Duration) time.Duration {
	return now.Truncate(period).Add(period).Sub(now)
}

// End stops the watch and returns the limit reached, if any: the one that
// ended the tree, or one its counters show now. Called once, before the
// cgroups are released.
func (w *Watch) End() string {
	close(w.stop)
	if h := <-w.done; h != "" {
		return h
	}
	return w.hit()
}

// counter reads "key N" from a flat-keyed cgroup file; 0 if absent.
func counter(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, _ := flatKey(b, key)
	return n
}

// flatKey finds "key N" in a flat-keyed cgroup file's content: N, and
// whether the key is there at all.
func flatKey(b []byte, key string) (int64, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, true
		}
	}
	return 0, false
}

// Counter reads "key N" from a flat-keyed cgroup file (cpu.stat,
// memory.events, ...); 0 if the key or the file is absent.
func Counter(file, key string) int64 { return counter(file, key) }

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

// ProcessAlive reports whether pid is a process (of any user).
func ProcessAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
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

// staleTrees lists the taskhost-<pid> directories in base whose daemon is
// gone: not this process, and no process of that pid runs.
func staleTrees(base string) []string {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		pidText, ok := strings.CutPrefix(e.Name(), "taskhost-")
		pid, err := strconv.Atoi(pidText)
		if !ok || !e.IsDir() || err != nil || pid == os.Getpid() || ProcessAlive(pid) {
			continue
		}
		dirs = append(dirs, base+"/"+e.Name())
	}
	return dirs
}

// children lists the cgroups directly in dir.
func children(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, dir+"/"+e.Name())
		}
	}
	return dirs
}

// scanLines calls fn with each line of file.
func scanLines(file string, fn func(string)) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fn(sc.Text())
	}
	return sc.Err()
}
