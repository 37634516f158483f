package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The run dir's disk. A plugin under a uid other than the daemon's writes
// only beneath its run dir — its private dir (HOME, TMPDIR, the seed
// cache's copy) and the socket dir go-plugin makes there — and the
// read_write paths its operator names. Its run dir is a tmpfs of its own,
// mounted by the daemon in its own namespace (the host dials the socket in
// it): what the plugin writes there stops at the tmpfs's size with ENOSPC,
// its pages are charged to the plugin's memory cgroup too, and nothing of
// it reaches the filesystem the store and the workspaces live on.

// runDiskInodes bounds the files of a run dir's tmpfs.
const runDiskInodes = 65536

// mountRunDisk mounts a tmpfs of size bytes on dir. bounded is false, with
// no error, where this process may not mount (no CAP_SYS_ADMIN).
func mountRunDisk(dir string, size int64) (bounded bool, err error) {
	opts := "size=" + strconv.FormatInt(size, 10) + ",nr_inodes=" + strconv.Itoa(runDiskInodes) + ",mode=0711"
	err = unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EPERM):
		return false, nil
	}
	return false, fmt.Errorf("mount a tmpfs of %d bytes on %s: %w", size, dir, err)
}

// removeRunDir unmounts dir's tmpfs, if it has one, and removes dir with
// all it holds.
func removeRunDir(dir string) {
	if dir == "" {
		return
	}
	// Detached: a process of the plugin's that still held a file open
	// cannot keep the path; EINVAL is a dir that is no mount.
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	os.RemoveAll(dir)
}

// RunDirPrefix is the name prefix, under the system temp dir, of the run
// dirs of the daemon whose plugins' socket dir is socketDir: one per data
// dir, so that the next start on it knows what a dead daemon left.
func RunDirPrefix(socketDir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(socketDir)))
	return "taskhost-plugin-" + hex.EncodeToString(sum[:6]) + "-"
}

// SweepRunDirs removes the run dirs a daemon on the same data dir left
// when it died (a SIGKILL skips every Stop), with their tmpfs: those
// whose plugins' socket dir was socketDir. It returns how many it
// removed. Call it once at start, with the data dir locked, before any
// plugin starts.
func SweepRunDirs(socketDir string) int {
	stale, _ := filepath.Glob(filepath.Join(os.TempDir(), RunDirPrefix(socketDir)+"*"))
	for _, dir := range stale {
		removeRunDir(dir)
	}
	return len(stale)
}
