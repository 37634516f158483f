package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A run dir a dead daemon left, tmpfs and all, is removed by the next
// start on the same data dir; another data dir's is not touched.
func TestSweepRunDirsRemovesOnlyItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run dirs are tmpfs mounts only under a root daemon")
	}
	mine, theirs := filepath.Join(t.TempDir(), "plugins"), filepath.Join(t.TempDir(), "plugins")
	left := func(socketDir string) string {
		t.Helper()
		dir, err := os.MkdirTemp("", RunDirPrefix(socketDir))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeRunDir(dir) })
		if bounded, err := mountRunDisk(dir, 1<<20); err != nil || !bounded {
			t.Fatalf("mount: bounded %v, %v", bounded, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "left"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stale, other := left(mine), left(theirs)
	if n := SweepRunDirs(mine); n != 1 {
		t.Errorf("swept %d run dirs, want 1", n)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale run dir is still there: %v", err)
	}
	if isMount(t, stale) {
		t.Error("the stale run dir's tmpfs is still mounted")
	}
	if _, err := os.Stat(filepath.Join(other, "left")); err != nil {
		t.Errorf("another data dir's run dir was touched: %v", err)
	}
}

// A run dir's tmpfs refuses a write past its size with ENOSPC.
func TestRunDiskBoundsWrites(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run dirs are tmpfs mounts only under a root daemon")
	}
	dir := t.TempDir()
	if bounded, err := mountRunDisk(dir, 1<<20); err != nil || !bounded {
		t.Fatalf("mount: bounded %v, %v", bounded, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(dir, "at"), make([]byte, 1<<19), 0o600); err != nil {
		t.Fatalf("half the size: %v", err)
	}
	err := os.WriteFile(filepath.Join(dir, "past"), make([]byte, 1<<20), 0o600)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("a write past the size: %v, want ENOSPC", err)
	}
}

func isMount(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}
