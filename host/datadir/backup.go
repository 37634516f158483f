package datadir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/store"
)

// KeyBytes is the size of a host key.
const KeyBytes = 32

// BackupInfo describes a backup Backup wrote.
type BackupInfo struct {
	Dir        string // the backup directory
	StoreBytes int64  // the size of the store's copy
}

// Backup writes a backup of the data dir to dest, a directory it creates
// (mode 0700; dest must not exist) holding the two files a data dir cannot
// be rebuilt without, each mode 0600: StoreFile, a consistent copy of the
// store made with SQLite's VACUUM INTO in one read transaction (safe while
// a daemon runs), and KeyFile, the host key every checkpoint is sealed
// with. A backup that fails is removed.
func Backup(ctx context.Context, dataDir, dest string) (info BackupInfo, err error) {
	if err := RefusePostgres(dataDir, "back it up"); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	key, err := readKey(filepath.Join(dataDir, KeyFile))
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	st, err := store.Open(ctx, filepath.Join(dataDir, StoreFile), store.Options{ReadOnly: true})
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	defer st.Close()
	if err := os.Mkdir(dest, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return BackupInfo{}, fmt.Errorf("backup: %s already exists: choose a new name", dest)
		}
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dest)
		}
	}()
	dbPath := filepath.Join(dest, StoreFile)
	if err := st.Backup(ctx, dbPath); err != nil {
		return BackupInfo{}, err
	}
	if err := writeNew(filepath.Join(dest, KeyFile), key, -1, -1); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	if err := syncDir(dest); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	fi, err := os.Stat(dbPath)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	return BackupInfo{Dir: dest, StoreBytes: fi.Size()}, nil
}

// readKey reads a host key without creating one or following a symlink.
// Unlike the daemon's own load it does not insist on the caller's uid: an
// operator may back up a data dir of another user.
func readKey(path string) ([]byte, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	defer f.Close()
	key, err := io.ReadAll(io.LimitReader(f, KeyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("host key %s: %w", path, err)
	}
	if len(key) != KeyBytes {
		return nil, fmt.Errorf("host key %s is %d bytes, want %d", path, fi.Size(), KeyBytes)
	}
	return key, nil
}

// openRegular opens path for reading if it is a regular file, not
// following a symlink and not blocking on a FIFO.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, fmt.Errorf("%s is a symlink: give the file itself", path)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s, not a regular file", path, describeType(fi))
	}
	return f, fi, nil
}

// writeNew creates path (which must not exist) with mode 0600, writes data,
// syncs it and, when uid is not -1, gives it to uid:gid.
func writeNew(path string, data []byte, uid, gid int) error {
	return copyNew(path, bytes.NewReader(data), uid, gid)
}

// copyNew creates path (which must not exist; a symlink there is refused)
// with mode 0600, copies r into it, syncs it and, when uid is not -1, gives
// it to uid:gid.
func copyNew(path string, r io.Reader, uid, gid int) error {
	return copyNewAt(unix.AT_FDCWD, path, r, uid, gid)
}

// copyNewAt is copyNew for name beneath directory dirfd.
func copyNewAt(dirfd int, name string, r io.Reader, uid, gid int) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = io.Copy(f, r)
	if err == nil && uid != -1 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(dirfd, name, 0) //nolint:errcheck // the write's error is the one to report
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// RestoreOptions say who the restored data dir is for.
type RestoreOptions struct {
	// UID and GID own the restored data dir and its files: the user the
	// daemon will run as. -1 (or both 0 when the caller is not root) means
	// the caller's.
	UID, GID int
}

// CheckpointVerifier checks t's stored checkpoint against key; a task
// without one verifies.
type CheckpointVerifier func(key []byte, t store.Task) error

// RestoreInfo describes a restore.
type RestoreInfo struct {
	Checkpoints int // checkpoints that verified against the restored key
}

// Restore makes dataDir a data dir holding the backup in src (written by
// Backup): the store and the host key, each mode 0600, owned by
// opts.UID:GID. dataDir must not exist (it is created 0700) or be an empty
// directory the daemon would trust (that user's, not a symlink, not
// writable by group or others); anything else is refused and left as it
// was. The restored store is then opened and every checkpoint in it
// verified with the restored key; if one does not verify, what Restore
// wrote is removed again and the error says which task. verify checks one
// task's checkpoint against the key, as a resume would: the envelope is
// the engine's (host.Restore passes its own).
//
// The data dir is looked up by path once, through its parent: every step
// after that — creating it, giving it to the user, writing its files,
// opening the restored store, removing what a failed restore wrote — goes
// through descriptors, so a user who may write the parent and swaps the
// data dir for a symlink meanwhile gets nothing chowned or written but the
// directory Restore itself made and holds open.
func Restore(ctx context.Context, src, dataDir string, verify CheckpointVerifier, opts RestoreOptions) (info RestoreInfo, err error) {
	if verify == nil {
		return RestoreInfo{}, errors.New("restore: no checkpoint verifier: use host.Restore")
	}
	uid, gid := opts.UID, opts.GID
	if uid < 0 {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	chownTo := -1
	if uid != os.Geteuid() {
		chownTo = uid
	}
	if fi, err := os.Lstat(src); err != nil {
		return RestoreInfo{}, fmt.Errorf("restore: backup: %w", err)
	} else if !fi.IsDir() {
		return RestoreInfo{}, fmt.Errorf("restore: backup %s is %s: give the directory 'taskhost backup' wrote", src, describeType(fi))
	}
	key, err := readKey(filepath.Join(src, KeyFile))
	if err != nil {
		return RestoreInfo{}, fmt.Errorf("restore: backup: %w", err)
	}
	db, _, err := openRegular(filepath.Join(src, StoreFile))
	if err != nil {
		return RestoreInfo{}, fmt.Errorf("restore: backup: %w", err)
	}
	defer db.Close()

	target, err := openRestoreTarget(dataDir, uid)
	if err != nil {
		return RestoreInfo{}, err
	}
	defer target.close()
	dirfd := target.fd
	if target.created && chownTo != -1 {
		if err := unix.Fchown(dirfd, uid, gid); err != nil {
			target.removeCreated()
			return RestoreInfo{}, fmt.Errorf("restore: %w", err)
		}
	}
	written := []string{}
	defer func() {
		if err == nil {
			return
		}
		for _, name := range append(written, StoreFile+"-wal", StoreFile+"-shm") {
			unix.Unlinkat(dirfd, name, 0) //nolint:errcheck // best effort: the restore's error is reported
		}
		target.removeCreated()
	}()
	for _, f := range []struct {
		name string
		r    io.Reader
	}{{KeyFile, bytes.NewReader(key)}, {StoreFile, db}} {
		if err := copyNewAt(dirfd, f.name, f.r, chownTo, gid); err != nil {
			return RestoreInfo{}, fmt.Errorf("restore: %w", err)
		}
		written = append(written, f.name)
	}
	if err := unix.Fsync(dirfd); err != nil {
		return RestoreInfo{}, fmt.Errorf("restore: sync %s: %w", dataDir, err)
	}
	// The store is opened through the held directory, not its path.
	n, err := verifyCheckpoints(ctx, filepath.Join(target.procPath(), StoreFile), key, verify)
	// Opening the store may leave SQLite's side files, made by this
	// process: the daemon refuses them unless they are its user's.
	for _, name := range []string{StoreFile + "-wal", StoreFile + "-shm"} {
		if chownTo == -1 {
			break
		}
		cerr := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		if cerr != nil && !errors.Is(cerr, unix.ENOENT) && err == nil {
			err = cerr
		}
	}
	if err != nil {
		return RestoreInfo{}, fmt.Errorf("restore: %w", err)
	}
	return RestoreInfo{Checkpoints: n}, nil
}

// restoreTarget is the data dir a restore writes, held open.
type restoreTarget struct {
	parent, fd int
	base       string
	created    bool // Restore made it, and removes it on failure
}

func (t *restoreTarget) close() {
	unix.Close(t.fd)
	unix.Close(t.parent)
}

// procPath names the held directory for what only takes a path (SQLite).
func (t *restoreTarget) procPath() string { return fmt.Sprintf("/proc/self/fd/%d", t.fd) }

// removeCreated removes the data dir Restore made, if it is still the one
// held open and empty: through the parent's descriptor, never by a path.
func (t *restoreTarget) removeCreated() {
	if !t.created {
		return
	}
	var held, there unix.Stat_t
	if unix.Fstat(t.fd, &held) != nil || unix.Fstatat(t.parent, t.base, &there, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		held.Dev != there.Dev || held.Ino != there.Ino {
		return // moved or replaced since: not ours to remove by that name
	}
	unix.Unlinkat(t.parent, t.base, unix.AT_REMOVEDIR) //nolint:errcheck // best effort
}

// openRestoreTarget creates dataDir (0700) beneath its parent and opens it,
// or opens the empty directory already there, which the daemon running as
// uid must trust (that user's, not a symlink, not writable by group or
// others): the checks are made on the open directory itself.
func openRestoreTarget(dataDir string, uid int) (_ *restoreTarget, err error) {
	dataDir = filepath.Clean(dataDir)
	t := &restoreTarget{parent: -1, fd: -1, base: filepath.Base(dataDir)}
	if t.base == "/" || t.base == "." || t.base == ".." {
		return nil, fmt.Errorf("restore: data dir %q: give a directory to create or an empty one", dataDir)
	}
	if t.parent, err = unix.Open(filepath.Dir(dataDir), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("restore: data dir's parent %s: %w", filepath.Dir(dataDir), err)
	}
	defer func() {
		if err != nil {
			t.removeCreated()
			t.close()
		}
	}()
	switch err := unix.Mkdirat(t.parent, t.base, 0o700); {
	case err == nil:
		t.created = true
	case !errors.Is(err, unix.EEXIST):
		return nil, fmt.Errorf("restore: data dir %s: %w", dataDir, err)
	}
	if t.fd, err = unix.Openat(t.parent, t.base, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			found := "is not a directory"
			buf := make([]byte, 4096)
			if n, lerr := unix.Readlinkat(t.parent, t.base, buf); lerr == nil {
				found = "is a symlink to " + string(buf[:n])
			}
			return nil, fmt.Errorf("restore: data dir %s %s: restore only into a new or empty directory (the host follows no link in its data dir)", dataDir, found)
		}
		return nil, fmt.Errorf("restore: data dir %s: %w", dataDir, err)
	}
	fi, err := fstatInfo(t.fd, dataDir)
	if err != nil {
		return nil, fmt.Errorf("restore: data dir %s: %w", dataDir, err)
	}
	want := uid
	if t.created {
		// Made by this process a moment ago: anything else there now is
		// someone else's directory moved into its place.
		want = os.Geteuid()
	}
	if err := checkEntry(dataDir, fi, kindDir, want); err != nil {
		t.created = false // not the one Restore made
		return nil, fmt.Errorf("restore: %w", err)
	}
	names, err := readDirNames(t.fd)
	if err != nil {
		return nil, fmt.Errorf("restore: data dir %s: %w", dataDir, err)
	}
	if len(names) > 0 {
		return nil, fmt.Errorf("restore: data dir %s is not empty (it holds %q): restore only into a new or empty directory, never over a data dir in use", dataDir, names[0])
	}
	return t, nil
}

// fstatInfo is the fs.FileInfo of open fd, named name.
func fstatInfo(fd int, name string) (fs.FileInfo, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), name)
	defer f.Close()
	return f.Stat()
}

// readDirNames lists directory fd's entries, "." and ".." left out,
// without moving fd's own offset for others (it reads a duplicate).
func readDirNames(fd int) ([]string, error) {
	d, err := unix.Openat(fd, ".", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(d)
	var names []string
	buf := make([]byte, 8<<10)
	for {
		n, err := unix.Getdents(d, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// verifyCheckpoints opens the store at path read-only and checks every
// task's checkpoint against key, as a resume would. It returns how many
// verified.
func verifyCheckpoints(ctx context.Context, path string, key []byte, verify CheckpointVerifier) (int, error) {
	st, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	n := 0
	var after int64
	for {
		page, err := st.CheckpointedTasks(ctx, after, 100)
		if err != nil {
			return n, err
		}
		if len(page) == 0 {
			return n, nil
		}
		for _, t := range page {
			if err := verify(key, t); err != nil {
				return n, fmt.Errorf("task %s: its checkpoint does not verify with the backup's key (%w): the key and the store are not from the same data dir", t.ID, err)
			}
			n++
		}
		after = page[len(page)-1].Seq
	}
}
