package datadir

import (
	"syscall"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
)

// A child another goroutine forks holds a copy of every descriptor until
// it execs; one holding the lock's must not keep the data dir from the
// next Open once the host closed. The dup stands for that child's copy:
// it refers to the same open file, as a fork's does.
func TestCloseReleasesTheLockAForkedChildShares(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	d := openBareDir(t, dir)
	child, err := syscall.Dup(int(d.lock.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(child)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tryOpen(t, dir); err != nil {
		t.Fatalf("reopen after close, a forked child still holding the lock's descriptor: %v", err)
	}
}
