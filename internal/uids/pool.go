// Package uids hands out the unprivileged uids that untrusted processes —
// approved shell.run commands, executor plugins — run under, one per
// process tree, so that nothing keyed on the daemon's uid (its API socket,
// a PostgreSQL role by peer authentication, its data dir) and nothing of
// another task is reachable from inside: in the manner of systemd's
// DynamicUser, from a configured range with no /etc/passwd entries.
//
// A uid goes back to the pool only once no process runs under it, and its
// lock file then says so: its next Acquire takes it without a kill, while
// one a dead daemon held is killed first. Release
// first has a helper running as the uid itself send SIGKILL to -1: the
// kernel signals every process the uid may signal in one pass that a fork
// cannot slip past (a scan of /proc can miss a child whose parent forked it
// and exited between the scan's read of the pid list and its look at the
// parent). Then it scans /proc for any process whose real, effective, saved
// or filesystem uid is the released one (signalled through a pidfd, so a
// reused pid is never hit) until none is left alive. Only root can run
// processes under other uids, so a Pool is only made by a root daemon.
package uids

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of a range.
const (
	// MinFirst keeps a range above the uids distributions give to system
	// and regular accounts.
	MinFirst = 65536
	// MaxLast keeps every uid of a range a positive int32: some tools
	// still read uids as signed.
	MaxLast  = 1<<31 - 2
	MaxCount = 1 << 20
)

// DefaultFirst and DefaultCount are the default range: 2,000,000,000 to
// 2,000,065,535, above the ranges Debian allocates to accounts (up to
// 60,000), systemd's DynamicUser (61,184–65,519) and systemd-nspawn's
// containers (524,288–1,879,048,191).
const (
	DefaultFirst = 2_000_000_000
	DefaultCount = 65536
)

// ErrExhausted: every uid of the pool is in use.
var ErrExhausted = errors.New("uids: every uid of the pool is in use")

// ErrReserved: only the uids AcquireLeaving must leave free are free.
var ErrReserved = errors.New("uids: only the reserved uids are free")

// Range is a contiguous range of uids: First, First+1, … First+Count-1.
// Each uid is also the gid of the processes run under it.
type Range struct {
	First, Count int
}

// Contains reports whether uid is in r.
func (r Range) Contains(uid int) bool { return r.Count > 0 && uid >= r.First && uid < r.First+r.Count }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.First, r.First+r.Count-1) }

// Check refuses a range outside the bounds.
func (r Range) Check() error {
	switch {
	case r.Count < 1 || r.Count > MaxCount:
		return fmt.Errorf("uid range count is %d: it must be 1..%d", r.Count, MaxCount)
	case r.First < MinFirst || r.First > MaxLast-r.Count+1:
		return fmt.Errorf("uid range starts at %d: it must start at %d or above and end at %d at most (got %s)", r.First, MinFirst, MaxLast, r)
	}
	return nil
}

// Pool allocates uids of a Range. It is safe for concurrent use, and
// several daemons on one machine may share a range: each uid in use is
// held by an flock on its file in a lock dir every pool of the machine
// shares (LockDir), so no two daemons hand out the same uid, and one that
// dies lets go of its uids with its file descriptors.
type Pool struct {
	r       Range
	lockDir string

	// kill ends every process of a uid: KillAll, but for tests.
	kill func(uid int) error

	mu   sync.Mutex
	used map[int]*os.File // the uid's lock, held while it is in use
	next int              // the next uid to try, so a released uid is the last reused
}

// The state a uid's lock file records, for whoever locks it next. A uid
// whose last holder released it (every process of it killed) is clean:
// only root can start a process under it, so none runs, and its next
// Acquire needs no kill. One whose holder died holding it (the file says
// held, or anything else, a write cut short) may have processes left, and
// its next Acquire kills them first. A fresh file (none since boot: the
// lock dir is on /run's tmpfs) is clean too.
const (
	lockClean = "clean\n"
	lockHeld  = "held\n"
)

// lockDir is where the pools of a machine lock the uids they hand out:
// /run/taskhost-uids, or under the system temp dir where there is no /run
// (there a local user could make it first, and the daemon then refuses to
// start, naming it).
func lockDir() string {
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
		return "/run/taskhost-uids"
	}
	return filepath.Join(os.TempDir(), "taskhost-uids")
}

// NewPool returns a pool over r. It refuses a range in which /etc/passwd or
// /etc/group names an account: a process run under that uid would be that
// account to everything that looks it up.
func NewPool(r Range) (*Pool, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	for _, file := range []string{"/etc/passwd", "/etc/group"} {
		if name, id, err := firstIn(file, r); err != nil {
			return nil, err
		} else if name != "" {
			return nil, fmt.Errorf("uid range %s holds %q (id %d) of %s: choose a range no account uses ([confinement] uid_first, uid_count)", r, name, id, file)
		}
	}
	dir := lockDir()
	if err := trustedLockDir(dir); err != nil {
		return nil, err
	}
	return &Pool{r: r, lockDir: dir, kill: KillAll, used: map[int]*os.File{}, next: r.First}, nil
}

// trustedLockDir makes dir (0700, root's) or checks the one there: a lock
// dir someone else could write would let them hold every uid, or point a
// lock file elsewhere.
func trustedLockDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("uids: lock dir: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("uids: lock dir: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o077 != 0 {
		return fmt.Errorf("uids: lock dir %s must be a directory of root's with mode 0700 (found mode %o, uid %d): remove it and restart", dir, st.Mode, st.Uid)
	}
	return nil
}

// lock takes uid's lock file, or reports false when another pool holds it.
// fresh reports that the file did not exist: no pool has handed the uid out
// since the lock dir was made (at boot, /run being a tmpfs), so no process
// can run under it.
func (p *Pool) lock(uid int) (f *os.File, ok, fresh bool, err error) {
	path := fmt.Sprintf("%s/%d", p.lockDir, uid)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	fresh = err == nil
	if errors.Is(err, unix.EEXIST) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, false, false, fmt.Errorf("uids: lock %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, false, nil
		}
		return nil, false, false, fmt.Errorf("uids: lock %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), true, fresh, nil
}

// Range is the pool's range.
func (p *Pool) Range() Range { return p.r }

// Free is how many uids of the range this pool does not hold now (another
// daemon sharing the range may hold some of them).
func (p *Pool) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.Count - len(p.used)
}

// Acquire returns a uid no process of this pool or of another on the
// machine runs under, or ErrExhausted. Whatever still runs under it (left
// by a daemon that died) is killed first; a uid no pool has locked since
// the lock dir was made has nothing to kill, and is handed out at once.
func (p *Pool) Acquire() (int, error) { return p.AcquireLeaving(0) }

// AcquireLeaving is Acquire that leaves reserve uids free: with reserve or
// fewer free it takes none and returns ErrReserved. The count and the
// taking are one step, so concurrent callers never eat into the reserve.
func (p *Pool) AcquireLeaving(reserve int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if reserve > 0 && p.r.Count-len(p.used) <= reserve {
		return 0, fmt.Errorf("%w (%d free of range %s)", ErrReserved, p.r.Count-len(p.used), p.r)
	}
	for range p.r.Count {
		uid := p.next
		p.next++
		if p.next == p.r.First+p.r.Count {
			p.next = p.r.First
		}
		if p.used[uid] != nil {
			continue
		}
		f, ok, fresh, err := p.lock(uid)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue // another daemon's
		}
		if !fresh && !released(f) {
			if err := p.kill(uid); err != nil {
				f.Close()
				return 0, err
			}
		}
		if err := mark(f, lockHeld); err != nil {
			f.Close()
			return 0, err
		}
		p.used[uid] = f
		return uid, nil
	}
	return 0, fmt.Errorf("%w (%d of range %s)", ErrExhausted, p.r.Count, p.r)
}

// sweepFor bounds how long KillAll waits for the processes it signalled to
// die: a process tree forking as fast as it is killed is bounded by its
// RLIMIT_NPROC, which counts only its own processes, and after the helper's
// kill nothing of the uid can fork at all.
const sweepFor = 10 * time.Second

// Release kills every process running under uid and returns uid to the
// pool. A uid whose processes could not all be killed stays out of the pool
// (and the error says so): reusing it would put another task's process
// beside them.
func (p *Pool) Release(uid int) error {
	if !p.r.Contains(uid) {
		return fmt.Errorf("uids: %d is not in the pool's range %s", uid, p.r)
	}
	if err := p.kill(uid); err != nil {
		return err
	}
	return p.unlock(uid)
}

// unlock marks uid's lock file clean and lets the lock go.
func (p *Pool) unlock(uid int) error {
	p.mu.Lock()
	f := p.used[uid]
	delete(p.used, uid)
	p.mu.Unlock()
	if f == nil {
		return nil
	}
	// Unmarked, the uid is only killed again at its next Acquire.
	merr := mark(f, lockClean)
	// Unlocked first: a child forked meanwhile shares this open file (and
	// so its flock) until it execs, and the uid would look another
	// daemon's to the next Acquire.
	uerr := unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if err := f.Close(); err != nil {
		return err
	}
	if uerr != nil {
		return fmt.Errorf("uids: unlock %d: %w", uid, uerr)
	}
	return merr
}

// ReleaseEmpty returns uid to the pool without a kill: the caller knows
// no process runs under it. A plugin's uid is released so once the cgroups
// its every process was born in (joined before the uid was taken) were
// removed empty, which the kernel allows only when none is left; the kill
// and the /proc scan of Release would find nothing.
func (p *Pool) ReleaseEmpty(uid int) error {
	if !p.r.Contains(uid) {
		return fmt.Errorf("uids: %d is not in the pool's range %s", uid, p.r)
	}
	return p.unlock(uid)
}

// released reports whether the lock file f says its last holder released
// its uid.
func released(f *os.File) bool {
	var b [len(lockClean) + 1]byte
	n, _ := f.ReadAt(b[:], 0)
	return string(b[:n]) == lockClean
}

// mark records state in the lock file f.
func mark(f *os.File, state string) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("uids: mark %s %s: %w", f.Name(), strings.TrimSpace(state), err)
	}
	if _, err := f.WriteAt([]byte(state), 0); err != nil {
		return fmt.Errorf("uids: mark %s %s: %w", f.Name(), strings.TrimSpace(state), err)
	}
	return nil
}

// KillAll sends SIGKILL to every live process any of whose uids is uid,
// until a scan of /proc finds none. Zombies are left to their parents:
// they run nothing.
func KillAll(uid int) error {
	helperErr := killAsUID(uid)
	deadline := time.Now().Add(sweepFor)
	for rounds := 1; ; rounds++ {
		found, err := killRound(uid)
		if err != nil {
			return err
		}
		if found == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("uids: processes of uid %d still alive after %d rounds of SIGKILL in %s (the kill as the uid: %v)", uid, rounds, sweepFor, helperErr)
		}
		if helperErr == nil {
			// Signalled by the helper's kill: they are only dying, and
			// cannot fork. Let them, rather than spin over /proc.
			time.Sleep(time.Millisecond)
		}
	}
}

// killAsUID runs kill(-1, SIGKILL) as uid, in a /bin/sh of its own: the
// kernel then signals every process uid may signal (those whose real or
// saved uid is uid) but the sender, under the task list lock that fork
// also takes, so no child is created past it. The daemon cannot make that
// call itself: setuid in a Go program changes every thread of it.
func killAsUID(uid int) error {
	cmd := exec.Command("/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0")
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("uids: kill the processes of uid %d as that uid: %w %s", uid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// killRound signals the processes of uid found in one scan of /proc and
// returns how many it found.
func killRound(uid int) (int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, fmt.Errorf("uids: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("uids: read /proc: %w", err)
	}
	found := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		// Most processes are not uid's: a first look, without a pidfd,
		// passes them over (a scan runs at every release).
		if live, ok := runsAs(pid, uid); !ok || !live {
			continue
		}
		// The pidfd first, the check second: the pidfd then names the
		// process that was checked, even if the pid is reused meanwhile.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone
		}
		if live, ok := runsAs(pid, uid); ok && live {
			found++
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
	return found, nil
}

// runsAs reports whether process pid has uid among its uids (ok) and is not
// a zombie (live).
func runsAs(pid, uid int) (live, ok bool) {
	// Plain syscalls, not os.Open and a scanner: this runs for every
	// process of the machine at every release.
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, false
	}
	defer unix.Close(fd)
	// State and Uid are among the first lines; the file is a few KiB.
	var buf [8192]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
		if s := string(buf[:n]); strings.Contains(s, "\nUid:") && strings.IndexByte(s[strings.Index(s, "\nUid:")+1:], '\n') >= 0 {
			break // the whole Uid line is in: no read to the end
		}
	}
	want := strconv.Itoa(uid)
	live = true
	for line := range strings.Lines(string(buf[:n])) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), ":")
		switch k {
		case "State":
			live = !strings.HasPrefix(strings.TrimSpace(v), "Z")
		case "Uid":
			for _, id := range strings.Fields(v) {
				if id == want {
					ok = true
				}
			}
			return live, ok // State comes before Uid
		}
	}
	return false, false
}

// firstIn returns the first account of an /etc/passwd-format file whose id
// (the third field) is in r.
func firstIn(path string, r Range) (string, int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("uids: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		id, err := strconv.Atoi(fields[2])
		if err == nil && r.Contains(id) {
			return fields[0], id, nil
		}
	}
	return "", 0, sc.Err()
}
