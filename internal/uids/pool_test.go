package uids

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestRangeCheck(t *testing.T) {
	for _, c := range []struct {
		r  Range
		ok bool
	}{
		{Range{DefaultFirst, DefaultCount}, true},
		{Range{MinFirst, 1}, true},
		{Range{MinFirst - 1, 1}, false},
		{Range{MaxLast, 1}, true},
		{Range{MaxLast, 2}, false},
		{Range{MinFirst, MaxCount}, true},
		{Range{MinFirst, MaxCount + 1}, false},
		{Range{MinFirst, 0}, false},
	} {
		if err := c.r.Check(); (err == nil) != c.ok {
			t.Errorf("Range%v.Check() = %v, want ok %v", c.r, err, c.ok)
		}
	}
}

// Acquire hands out each uid once until the pool is exhausted; a released
// uid is handed out again, after the others.
func TestAcquireRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a pool is a root daemon's: it kills a uid's processes and locks its uids in a root dir")
	}
	p := testPool(Range{DefaultFirst + 300000, 2}, t.TempDir())
	other := testPool(p.r, p.lockDir)
	a, err := p.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Acquire()
	if err != nil || b == a {
		t.Fatalf("second Acquire = %d, %v; want a uid other than %d", b, err, a)
	}
	if _, err := p.Acquire(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("third Acquire of 2: %v, want ErrExhausted", err)
	}
	// Another daemon sharing the range gets none of them.
	if u, err := other.Acquire(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("another pool's Acquire = %d, %v; want ErrExhausted while this one holds both", u, err)
	}
	if err := p.Release(p.r.First + 2); err == nil {
		t.Fatal("Release of a uid outside the range accepted")
	}
	if err := p.Release(a); err != nil {
		t.Fatal(err)
	}
	if c, err := other.Acquire(); err != nil || c != a {
		t.Fatalf("another pool's Acquire after Release = %d, %v; want %d", c, err, a)
	}
}

// KillAll leaves no live process of the uid: a detached child that
// ignores SIGTERM and a grandchild in its own session alike; another
// uid's process is untouched.
func TestKillAll(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a process under another uid needs root")
	}
	uid := DefaultFirst + 12345
	start := func(uid int, script string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	victim := start(uid, "trap '' TERM; (setsid sleep 60 &) ; sleep 60")
	bystander := start(uid+1, "sleep 60")
	t.Cleanup(func() {
		if err := KillAll(uid + 1); err != nil {
			t.Error(err)
		}
		_ = bystander.Wait()
	})
	if err := KillAll(uid); err != nil {
		t.Fatal(err)
	}
	err := victim.Wait()
	if ws, ok := victim.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("victim: %v, want killed by SIGKILL", err)
	}
	if n, err := killRound(uid); err != nil || n != 0 {
		t.Fatalf("a scan after KillAll found %d processes of uid %d (%v)", n, uid, err)
	}
	if err := bystander.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("another uid's process was hit: %v", err)
	}
}

// testPool is a pool over r locking its uids in dir.
func testPool(r Range, dir string) *Pool {
	return &Pool{r: r, lockDir: dir, kill: KillAll, used: map[int]*os.File{}, next: r.First}
}

// Acquire kills only what a holder may have left: a fresh uid (no lock
// file since boot) and one its last holder released (every process of it
// killed, the file marked clean) are handed out without a kill; one whose
// holder died holding it (the flock gone with its fds, the file still
// marked held) has its processes killed first. Release always kills.
func TestAcquireKillsOnlyWhatAHolderLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a process under another uid needs root")
	}
	r := Range{DefaultFirst + 300100, 1}
	p := testPool(r, t.TempDir())
	kills := 0
	p.kill = func(uid int) error { kills++; return KillAll(uid) }
	stray := func() *exec.Cmd {
		cmd := exec.Command("/bin/sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(r.First), Gid: uint32(r.First)}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first := stray()
	uid, err := p.Acquire()
	if err != nil || uid != r.First {
		t.Fatalf("Acquire = %d, %v; want %d", uid, err, r.First)
	}
	if err := first.Process.Signal(syscall.Signal(0)); err != nil || kills != 0 {
		t.Fatalf("the Acquire of a fresh uid killed (%d kills): %v", kills, err)
	}
	if err := p.Release(uid); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err == nil || kills != 1 {
		t.Fatalf("Release left a process of the uid alive (%d kills)", kills)
	}
	if _, err := p.Acquire(); err != nil || kills != 1 {
		t.Fatalf("the Acquire of a released uid: %v, %d kills, want none more", err, kills)
	}
	// The holder dies holding it: its lock goes with its fds, the file
	// still says held, and what it left runs on.
	p.mu.Lock()
	p.used[uid].Close()
	delete(p.used, uid)
	p.mu.Unlock()
	left := stray()
	next := testPool(r, p.lockDir)
	if _, err := next.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := left.Wait(); err == nil {
		t.Fatal("the Acquire of a uid a dead holder held left a process of it alive")
	}
}

// ReleaseEmpty trusts its caller: it sends no signal and scans nothing,
// and marks the uid clean, so its next Acquire does no kill either. A
// range check still refuses a uid the pool does not own.
func TestReleaseEmptyKillsNothing(t *testing.T) {
	r := Range{DefaultFirst + 300200, 1}
	p := testPool(r, t.TempDir())
	kills := 0
	p.kill = func(int) error { kills++; return nil }
	for round := range 2 {
		uid, err := p.Acquire()
		if err != nil || uid != r.First {
			t.Fatalf("round %d: Acquire = %d, %v; want %d", round, uid, err, r.First)
		}
		if err := p.ReleaseEmpty(uid); err != nil {
			t.Fatal(err)
		}
		if kills != 0 {
			t.Fatalf("round %d: %d kills, want none", round, kills)
		}
		if p.Free() != 1 {
			t.Fatalf("round %d: %d free after ReleaseEmpty, want 1", round, p.Free())
		}
	}
	if err := p.ReleaseEmpty(r.First + 1); err == nil || !strings.Contains(err.Error(), "not in the pool's range") {
		t.Fatalf("ReleaseEmpty of a uid outside the range: %v", err)
	}
}

// A process that forks its successor and exits, over and over, is a
// walker a scan of /proc can miss (the scan lists the pids, the parent
// forks and exits before the scan looks at it, the child is not listed).
// KillAll ends it all the same: the kill as the uid leaves it no fork.
func TestKillAllEndsAWalker(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a process under another uid needs root")
	}
	uid := DefaultFirst + 12400
	for range 20 {
		cmd := exec.Command("/bin/sh", "-c", "w() { ( w ) & }; w; sleep 60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := KillAll(uid); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		// Three scans in a row: a walker that escaped would be caught by
		// one of them, forking.
		for i := range 3 {
			if n, err := killRound(uid); err != nil || n != 0 {
				t.Fatalf("scan %d after KillAll found %d live processes of uid %d (%v)", i, n, uid, err)
			}
		}
	}
}

// A range holding an account's id is refused, naming it.
func TestFirstIn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, []byte("root:x:0:0::/root:/bin/sh\nbad line\nsvc:x:70001:70001::/:/bin/false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if name, id, err := firstIn(path, Range{70000, 2}); err != nil || name != "svc" || id != 70001 {
		t.Fatalf("firstIn = %q %d %v, want svc 70001", name, id, err)
	}
	if name, _, err := firstIn(path, Range{70002, 10}); err != nil || name != "" {
		t.Fatalf("firstIn past the account = %q, %v; want none", name, err)
	}
}

// BenchmarkAcquireRelease: a task's uid, handed out and back, on a fresh
// uid and on one released before: both take one kill, at Release (before
// a released uid's Acquire was a second kill); "emptied" is the release of
// a plugin whose cgroups were removed empty, which needs none.
func BenchmarkAcquireRelease(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("a pool is a root daemon's")
	}
	for _, c := range []struct {
		name  string
		fresh bool
		empty bool
	}{{"fresh", true, false}, {"reused", false, false}, {"emptied", false, true}} {
		b.Run(c.name, func(b *testing.B) {
			r := Range{DefaultFirst + 310000, MaxCount}
			p := testPool(r, b.TempDir())
			if !c.fresh {
				p.r.Count = 1
			}
			for b.Loop() {
				uid, err := p.Acquire()
				if err != nil {
					b.Fatal(err)
				}
				release := p.Release
				if c.empty {
					release = p.ReleaseEmpty
				}
				if err := release(uid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// AcquireLeaving never eats into its reserve, however many callers race:
// of 5 uids with 2 reserved, exactly 3 are taken by 16 concurrent callers,
// the rest get ErrReserved; Acquire may still take the reserved ones.
func TestAcquireLeavingHoldsItsReserve(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a pool is a root daemon's: it kills a uid's processes and locks its uids in a root dir")
	}
	p := testPool(Range{DefaultFirst + 300100, 5}, t.TempDir())
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken, reserved := 0, 0
	for range 16 {
		wg.Go(func() {
			_, err := p.AcquireLeaving(2)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				taken++
			case errors.Is(err, ErrReserved):
				reserved++
			default:
				t.Errorf("AcquireLeaving: %v", err)
			}
		})
	}
	wg.Wait()
	if taken != 3 || reserved != 13 || p.Free() != 2 {
		t.Fatalf("%d taken, %d refused as reserved, %d free; want 3, 13 and the 2 reserved", taken, reserved, p.Free())
	}
	for range 2 {
		if _, err := p.Acquire(); err != nil {
			t.Fatalf("Acquire of a reserved uid: %v", err)
		}
	}
	if _, err := p.Acquire(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire past the range: %v, want ErrExhausted", err)
	}
}

// A child forked while a uid is held shares its lock's open file until it
// execs; the uid's release must still free it at once for this pool and
// another. The dup stands for that child's copy of the descriptor.
func TestReleaseFreesAUidAForkedChildShares(t *testing.T) {
	r := Range{DefaultFirst + 300300, 1}
	p := testPool(r, t.TempDir())
	p.kill = func(int) error { return nil }
	uid, err := p.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	child, err := syscall.Dup(int(p.used[uid].Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(child)
	if err := p.ReleaseEmpty(uid); err != nil {
		t.Fatal(err)
	}
	other := testPool(r, p.lockDir)
	other.kill = p.kill
	if got, err := other.Acquire(); err != nil || got != uid {
		t.Fatalf("another pool's Acquire after the release = %d, %v; want %d", got, err, uid)
	}
}
