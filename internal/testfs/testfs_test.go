package testfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/taskhost/taskhost/internal/testfs"
)

func TestFillDiskLeavesNoByte(t *testing.T) {
	dir := testfs.MountTmpfs(t, t.TempDir(), 1<<20)
	filler := testfs.FillDisk(t, dir)
	err := os.WriteFile(filepath.Join(dir, "one-byte"), []byte{1}, 0o600)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a 1-byte write after FillDisk: %v, want ENOSPC", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "after"), []byte("back"), 0o600); err != nil {
		t.Fatalf("a write after removing the filler: %v", err)
	}
}
