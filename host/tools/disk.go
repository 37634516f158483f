package tools

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/internal/confine"
)

// A shell.run command's writes are bounded by a filesystem, not only by the
// tools' checks: under a root daemon the command sees its workspace
// through an overlay in a mount namespace of its own (confine.Policy.Overlay)
// whose upper layer is a tmpfs of MaxWorkspaceBytes minus what the
// workspace holds already, and at most MaxCommandEntries entries. A write
// past it fails with ENOSPC, and nothing the command does reaches the
// workspace — nor the data dir's filesystem — while it runs. Once every
// process of the command is gone the host merges the upper layer into the
// workspace (mergeUpper): files, directories, symlinks and FIFOs, deletions
// (whiteouts) and replaced directories (opaque ones), never following a
// symlink, each file renamed into place whole. If the merge would take the
// workspace past MaxWorkspaceBytes (sparse files and hard links take more
// room as files than in the tmpfs), nothing is merged and the result says
// limit "disk". The tmpfs is attached nowhere the host can be reached
// through: it lives as long as the host's descriptor and the command's
// namespace, so a daemon that dies mid-command loses the command's writes
// and leaves the workspace as it was before the command.

// Overlay xattrs of the upper layer (trusted.*: only root reads them).
const (
	xattrOpaque    = "trusted.overlay.opaque"
	xattrOverlay   = "trusted.overlay."
	mergeTmpPrefix = ".taskhost-merge-"
)

// workspaceDisk is one command's upper layer.
type workspaceDisk struct {
	mnt *os.File // the tmpfs, detached
}

// diskSupported reports why the filesystem bound cannot be had here, or nil.
func diskSupported() error {
	if os.Geteuid() != 0 {
		return errors.New("the daemon is not root: mounts need CAP_SYS_ADMIN")
	}
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\toverlay\n") {
		return errors.New("the kernel offers no overlay filesystem")
	}
	f, err := confine.NewOverlayUpper(4096, 4, 0, 0, 0o700)
	if err != nil {
		return err
	}
	return f.Close()
}

// newDisk makes the upper layer of a command in workspace dir: room for
// what the workspace may still take, its root owned as dir is.
func newDisk(ctx context.Context, dir string) (*workspaceDisk, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	used, err := usage(ctx, root)
	root.Close()
	if err != nil {
		return nil, fmt.Errorf("measure workspace: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	// A tmpfs holds whole pages; the smallest is one. The merge's own
	// check keeps the workspace within its limit whatever the rounding.
	size := max(MaxWorkspaceBytes-used, int64(os.Getpagesize()))
	mnt, err := confine.NewOverlayUpper(size, MaxCommandEntries, int(st.Uid), int(st.Gid), st.Mode&0o7777)
	if err != nil {
		return nil, err
	}
	return &workspaceDisk{mnt: mnt}, nil
}

// full reports whether the command has used up its room.
func (d *workspaceDisk) full() bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(d.mnt.Fd()), &st); err != nil {
		return false
	}
	return st.Bavail == 0 || st.Ffree == 0
}

func (d *workspaceDisk) close() { d.mnt.Close() }

// merge applies the upper layer to workspace dir; the command must be
// gone. It reports whether the changes were discarded because they would
// take the workspace past MaxWorkspaceBytes.
func (d *workspaceDisk) merge(ctx context.Context, dir string) (discarded bool, err error) {
	upper, err := unix.Openat(int(d.mnt.Fd()), confine.OverlayUpperDir, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return false, fmt.Errorf("merge: open upper: %w", err)
	}
	defer unix.Close(upper)
	ws, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return false, fmt.Errorf("merge: open workspace: %w", err)
	}
	defer unix.Close(ws)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	used, err := usage(ctx, root)
	root.Close()
	if err != nil {
		return false, fmt.Errorf("merge: measure workspace: %w", err)
	}
	plan := &merger{dry: true}
	if err := plan.dir(upper, ws, "."); err != nil {
		return false, err
	}
	if used-plan.freed+plan.added > MaxWorkspaceBytes {
		return true, nil
	}
	m := &merger{}
	if err := m.dir(upper, ws, "."); err != nil {
		return false, err
	}
	// Once, for every file merged: a command's many small files would
	// cost one flush each.
	if err := unix.Syncfs(ws); err != nil {
		return false, fmt.Errorf("merge: sync: %w", err)
	}
	return false, nil
}

// merger walks an upper directory and its workspace counterpart. A dry
// run changes nothing and sums the bytes the merge would add and free.
type merger struct {
	dry          bool
	added, freed int64
	entries      int
}

func (m *merger) dir(upper, ws int, path string) error {
	names, err := listDir(upper)
	if err != nil {
		return fmt.Errorf("merge: read %s: %w", path, err)
	}
	for _, name := range names {
		if m.entries++; m.entries > MaxCommandEntries {
			return fmt.Errorf("merge: more than %d entries", MaxCommandEntries)
		}
		if err := m.entry(upper, ws, path+"/"+name, name); err != nil {
			return err
		}
	}
	return nil
}

func (m *merger) entry(upper, ws int, path, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(upper, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("merge %s: %w", path, err)
	}
	// ws < 0: a dry run beneath a directory the merge would create.
	var old unix.Stat_t
	oldErr := error(unix.ENOENT)
	if ws >= 0 {
		oldErr = unix.Fstatat(ws, name, &old, unix.AT_SYMLINK_NOFOLLOW)
	}
	exists := oldErr == nil
	if oldErr != nil && !errors.Is(oldErr, unix.ENOENT) {
		return fmt.Errorf("merge %s: %w", path, oldErr)
	}
	oldIsDir := exists && old.Mode&unix.S_IFMT == unix.S_IFDIR
	mode := sanitizedMode(st.Mode)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return nil // a device: the command cannot make one, and none is merged
		}
		// A whiteout: the command removed it.
		if exists {
			return m.remove(ws, name, path)
		}
		return nil
	case unix.S_IFDIR:
		return m.mergeDir(upper, ws, name, path, &st, mode, exists, oldIsDir)
	case unix.S_IFREG, unix.S_IFLNK, unix.S_IFIFO:
		return m.mergeFile(upper, ws, name, path, &st, mode, exists, oldIsDir)
	default:
		return nil // a socket: nothing to keep of it
	}
}

// mergeDir merges upper's directory name into ws's (made when missing;
// replaced when the command made it opaque or ws holds no directory there).
func (m *merger) mergeDir(upper, ws int, name, path string, st *unix.Stat_t, mode uint32, exists, oldIsDir bool) error {
	sub, err := unix.Openat(upper, name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("merge %s: %w", path, err)
	}
	defer unix.Close(sub)
	// Opaque: the command replaced the directory; what it held is gone.
	if exists && (!oldIsDir || isOpaque(sub)) {
		if err := m.remove(ws, name, path); err != nil {
			return err
		}
		exists = false
	}
	if m.dry && !exists {
		return m.dir(sub, -1, path)
	}
	if !exists {
		if err := unix.Mkdirat(ws, name, mode); err != nil {
			return fmt.Errorf("merge %s: %w", path, err)
		}
	}
	wsub, err := unix.Openat(ws, name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("merge %s: %w", path, err)
	}
	defer unix.Close(wsub)
	if err := m.dir(sub, wsub, path); err != nil || m.dry {
		return err
	}
	if err := unix.Fchmod(wsub, mode); err != nil {
		return fmt.Errorf("merge %s: %w", path, err)
	}
	return unix.UtimesNanoAt(ws, name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// mergeFile puts a copy of upper's file, symlink or FIFO name over ws's,
// by a rename; a dry run counts its bytes and removes what it replaces.
func (m *merger) mergeFile(upper, ws int, name, path string, st *unix.Stat_t, mode uint32, exists, oldIsDir bool) error {
	if m.dry {
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			m.added += st.Size
		}
		if exists {
			return m.remove(ws, name, path)
		}
		return nil
	}
	tmp := mergeTmpPrefix + rand.Text()
	if err := m.place(upper, ws, name, tmp, st, mode); err != nil {
		_ = unix.Unlinkat(ws, tmp, 0)
		return fmt.Errorf("merge %s: %w", path, err)
	}
	if oldIsDir {
		// rename(2) puts a file over a file, not over a directory.
		if err := m.remove(ws, name, path); err != nil {
			_ = unix.Unlinkat(ws, tmp, 0)
			return err
		}
	}
	if err := unix.Renameat(ws, tmp, ws, name); err != nil {
		_ = unix.Unlinkat(ws, tmp, 0)
		return fmt.Errorf("merge %s: %w", path, err)
	}
	return unix.UtimesNanoAt(ws, name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// place makes tmp in ws a copy of upper's name: a file's content, mode
// and user xattrs (the idempotency keys), a symlink's target, a FIFO.
func (m *merger) place(upper, ws int, name, tmp string, st *unix.Stat_t, mode uint32) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(upper, name)
		if err != nil {
			return err
		}
		return unix.Symlinkat(target, ws, tmp)
	case unix.S_IFIFO:
		return unix.Mkfifoat(ws, tmp, mode)
	}
	src, err := unix.Openat(upper, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(src), name)
	defer in.Close()
	dst, err := unix.Openat(ws, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(dst), tmp)
	defer out.Close()
	if _, err := out.ReadFrom(in); err != nil {
		return err
	}
	if err := copyUserXattrs(src, dst); err != nil {
		return err
	}
	// No fsync per file: merge syncs the filesystem once at the end.
	return unix.Fchmod(dst, mode)
}

// remove deletes name in ws and all beneath it, through descriptors and
// never following a symlink; a dry run counts the bytes it would free.
func (m *merger) remove(ws int, name, path string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(ws, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("merge: remove %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			m.freed += st.Size
		}
		if m.dry {
			return nil
		}
		if err := unix.Unlinkat(ws, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("merge: remove %s: %w", path, err)
		}
		return nil
	}
	sub, err := unix.Openat(ws, name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("merge: remove %s: %w", path, err)
	}
	names, err := listDir(sub)
	if err != nil {
		unix.Close(sub)
		return fmt.Errorf("merge: remove %s: %w", path, err)
	}
	for _, n := range names {
		if m.entries++; m.entries > maxOwnedEntries {
			unix.Close(sub)
			return fmt.Errorf("merge: remove %s: more than %d entries", path, maxOwnedEntries)
		}
		if err := m.remove(sub, n, path+"/"+n); err != nil {
			unix.Close(sub)
			return err
		}
	}
	unix.Close(sub)
	if m.dry {
		return nil
	}
	if err := unix.Unlinkat(ws, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("merge: remove %s: %w", path, err)
	}
	return nil
}

// sanitizedMode is what a merged entry gets: no set-id bits, no group or
// other write (as the hand-back of ownership.go leaves a workspace).
func sanitizedMode(m uint32) uint32 {
	return m & 0o777 &^ 0o022
}

func isOpaque(dirFD int) bool {
	b := make([]byte, 4)
	n, err := unix.Fgetxattr(dirFD, xattrOpaque, b)
	return err == nil && n == 1 && b[0] == 'y'
}

func readlinkat(dir int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// copyUserXattrs copies the user.* xattrs of src to dst; the overlay's
// own (trusted.overlay.*) stay behind.
func copyUserXattrs(src, dst int) error {
	buf := make([]byte, 64<<10)
	n, err := unix.Flistxattr(src, buf)
	// Past 64 KiB of names (a command's doing: the host's keys are a few
	// hundred bytes), the file is kept without them.
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ERANGE) || n <= 0 {
		return nil
	}
	if err != nil {
		return err
	}
	for name := range strings.SplitSeq(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") || strings.HasPrefix(name, xattrOverlay) {
			continue
		}
		val := make([]byte, 64<<10)
		k, err := unix.Fgetxattr(src, name, val)
		if errors.Is(err, unix.ERANGE) || errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
		if err := unix.Fsetxattr(dst, name, val[:k], 0); err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

// listDir reads the names in directory fd through a descriptor of its own:
// a dup would share, and move, fd's offset, and the dry run and the merge
// read each directory once each.
func listDir(fd int) ([]string, error) {
	own, err := unix.Openat(fd, ".", unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return readDirNames(own)
}
