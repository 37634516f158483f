package host

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

	"github.com/taskhost/taskhost/store"
)

// keyBytes is the size of a host key.
const keyBytes = 32

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
	key, err := io.ReadAll(io.LimitReader(f, keyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("host key %s: %w", path, err)
	}
	if len(key) != keyBytes {
		return nil, fmt.Errorf("host key %s is %d bytes, want %d", path, fi.Size(), keyBytes)
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
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
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
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
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
// wrote is removed again and the error says which task.
func Restore(ctx context.Context, src, dataDir string, opts RestoreOptions) (info RestoreInfo, err error) {
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

	created, err := prepareRestoreTarget(dataDir, uid)
	if err != nil {
		return RestoreInfo{}, err
	}
	if created && chownTo != -1 {
		if err := os.Chown(dataDir, uid, gid); err != nil {
			os.Remove(dataDir)
			return RestoreInfo{}, fmt.Errorf("restore: %w", err)
		}
	}
	written := []string{}
	defer func() {
		if err == nil {
			return
		}
		for _, p := range written {
			os.Remove(p)
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			os.Remove(filepath.Join(dataDir, StoreFile+suffix))
		}
		if created {
			os.Remove(dataDir)
		}
	}()
	for _, f := range []struct {
		name string
		r    io.Reader
	}{{KeyFile, bytes.NewReader(key)}, {StoreFile, db}} {
		p := filepath.Join(dataDir, f.name)
		if err := copyNew(p, f.r, chownTo, gid); err != nil {
			return RestoreInfo{}, fmt.Errorf("restore: %w", err)
		}
		written = append(written, p)
	}
	if err := syncDir(dataDir); err != nil {
		return RestoreInfo{}, fmt.Errorf("restore: %w", err)
	}
	n, err := verifyCheckpoints(ctx, filepath.Join(dataDir, StoreFile), key)
	// Opening the store may leave SQLite's side files, made by this
	// process: the daemon refuses them unless they are its user's.
	for _, suffix := range []string{"-wal", "-shm"} {
		p := filepath.Join(dataDir, StoreFile+suffix)
		if _, serr := os.Lstat(p); serr == nil && chownTo != -1 {
			if cerr := os.Lchown(p, uid, gid); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		return RestoreInfo{}, fmt.Errorf("restore: %w", err)
	}
	return RestoreInfo{Checkpoints: n}, nil
}

// prepareRestoreTarget creates dataDir (0700) or checks that it is an empty
// directory the daemon running as uid would trust. created says whether it
// made it.
func prepareRestoreTarget(dataDir string, uid int) (created bool, err error) {
	fi, err := os.Lstat(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dataDir, 0o700); err != nil {
			return false, fmt.Errorf("restore: data dir: %w", err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("restore: data dir: %w", err)
	}
	if err := checkEntry(dataDir, fi, kindDir, uid); err != nil {
		return false, fmt.Errorf("restore: %w", err)
	}
	d, err := os.Open(dataDir)
	if err != nil {
		return false, fmt.Errorf("restore: data dir: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("restore: data dir: %w", err)
	}
	if len(names) > 0 {
		return false, fmt.Errorf("restore: data dir %s is not empty (it holds %q): restore only into a new or empty directory, never over a data dir in use", dataDir, names[0])
	}
	return false, nil
}

// verifyCheckpoints opens the store at path read-only and checks every
// task's checkpoint against key, as a resume would. It returns how many
// verified.
func verifyCheckpoints(ctx context.Context, path string, key []byte) (int, error) {
	st, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	seal := sealer{key: key}
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
			if _, err := seal.openStored(t); err != nil {
				return n, fmt.Errorf("task %s: its checkpoint does not verify with the backup's key (%w): the key and the store are not from the same data dir", t.ID, err)
			}
			n++
		}
		after = page[len(page)-1].Seq
	}
}
