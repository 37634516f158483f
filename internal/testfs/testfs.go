// Package testfs gives tests a real filesystem that runs out of space: a
// small tmpfs mounted on a directory of the test's, and a filler that takes
// every byte left on it. Tests that need it skip, with the reason, where
// mounting is not allowed. Tree reads a directory's files back.
package testfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size bytes (mode 0700) on dir, an empty
// directory the test owns, and unmounts it when the test ends. Register
// dir's removal before calling it, so the unmount runs first.
func MountTmpfs(t testing.TB, dir string, size int) string {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk writes a file in dir until its filesystem has no byte left and
// returns the file's path; removing the file gives the space back. It
// fills in large writes, then in small ones, so that not even a page of a
// small write is left for the code under test.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for _, n := range []int{len(buf), 512} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filling %s: %v", dir, err)
				}
				break
			}
		}
	}
	return path
}
