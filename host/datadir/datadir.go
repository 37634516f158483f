package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// apiSocketFile is the API socket's name in the data dir (api.SocketName;
// host/api imports this package, so it cannot be imported here).
const apiSocketFile = "taskhost.sock"

// ErrUntrustedDataDir matches every refusal of a data dir entry
// (errors.Is); the *UntrustedPathError says which entry and why.
var ErrUntrustedDataDir = errors.New("untrusted data dir")

// UntrustedPathError is a data dir entry the host refuses to use: a
// symlink, the wrong kind of file, another user's, or writable by others.
// Nothing has been written when it is returned.
type UntrustedPathError struct {
	Path  string // the entry, as the host would use it
	Found string // what is there, e.g. "is a symlink to /y"
	Fix   string // what the operator can do
}

func (e *UntrustedPathError) Error() string {
	return fmt.Sprintf("data dir %s %s: refusing; %s", e.Path, e.Found, e.Fix)
}

// Is makes errors.Is(err, ErrUntrustedDataDir) hold.
func (e *UntrustedPathError) Is(target error) bool { return target == ErrUntrustedDataDir }

// entryKind is what a data dir entry must be.
type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindSocket
	kindSecret // a regular file no one else may read: mode 0600 or stricter
)

func (k entryKind) String() string {
	switch k {
	case kindDir:
		return "a directory"
	case kindSocket:
		return "a socket"
	}
	return "a regular file"
}

// dataDirEntry is an entry of a data dir the host creates or reads,
// directly or through SQLite and go-plugin.
type dataDirEntry struct {
	name string
	kind entryKind
}

func dataDirEntries() []dataDirEntry {
	return []dataDirEntry{
		{LockFile, kindFile},
		{StoreFile, kindFile},
		{StoreFile + "-wal", kindFile},
		{StoreFile + "-shm", kindFile},
		{StoreFile + "-journal", kindFile},
		{KeyFile, kindSecret},
		{PostgresMarker, kindFile},
		{SocketDirName, kindDir},
		{WorkspaceDirName, kindDir},
		{CacheDirName, kindDir},
		{apiSocketFile, kindSocket},
	}
}

// checkDataDir refuses a data dir, or any entry of it the host uses, that
// another user could have planted or could change under the host: the data
// dir, whatever is there of the entries above and each task workspace must
// be owned by the daemon's effective uid, must not be symlinks (Lstat:
// nothing is followed), and directories must not be writable by group or
// others. It only reads: a refused data dir is left byte for byte as it was,
// modes included. A missing data dir is created 0700.
func checkDataDir(dir string) error {
	euid := os.Geteuid()
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("data dir %s: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := checkEntry(dir, fi, kindDir, euid); err != nil {
		return err
	}
	for _, e := range dataDirEntries() {
		path := filepath.Join(dir, e.name)
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("data dir %s: %w", path, err)
		}
		if err := checkEntry(path, fi, e.kind, euid); err != nil {
			return err
		}
	}
	return nil
}

// untrustedWorkspaces lists the task workspaces under root the tools would
// refuse (tools.Registry.CheckWorkspace): each makes its own task
// unavailable, never the daemon, so they are only reported at start.
func untrustedWorkspaces(root string, check func(taskID string) error) []error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil // no workspaces yet, or the check at each use says why
	}
	var bad []error
	for _, e := range entries {
		if err := check(e.Name()); err != nil {
			bad = append(bad, err)
		}
	}
	return bad
}

// checkEntry checks one Lstat result against what the entry must be.
func checkEntry(path string, fi fs.FileInfo, want entryKind, euid int) error {
	refuse := func(found, fix string) error { return &UntrustedPathError{Path: path, Found: found, Fix: fix} }
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		if err != nil {
			target = "(unreadable: " + err.Error() + ")"
		}
		return refuse("is a symlink to "+target, "remove the link and use the real path instead (the host follows no link in its data dir)")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return refuse("has no owner information", "put the data dir on a local POSIX file system")
	}
	if int(st.Uid) != euid {
		return refuse(fmt.Sprintf("is owned by uid %d, not by this daemon's uid %d", st.Uid, euid),
			fmt.Sprintf("run taskhost as uid %d, or use a data dir created by uid %d", st.Uid, euid))
	}
	switch want {
	case kindDir:
		if !fi.IsDir() {
			return refuse("is "+describeType(fi)+", not a directory", "move it aside")
		}
		if m := fi.Mode().Perm(); m&0o022 != 0 {
			return refuse(fmt.Sprintf("has mode %04o: it is writable by group or others", m), "run: chmod go-w "+path)
		}
	case kindSocket:
		if fi.Mode().Type() != fs.ModeSocket {
			return refuse("is "+describeType(fi)+", not a socket", "move it aside")
		}
	default:
		if !fi.Mode().IsRegular() {
			return refuse("is "+describeType(fi)+", not a regular file", "move it aside")
		}
		if m := fi.Mode().Perm(); want == kindSecret && m&0o077 != 0 {
			return refuse(fmt.Sprintf("has mode %04o: it must be 0600, anyone who can read it can forge checkpoints", m), "run: chmod 600 "+path)
		}
	}
	return nil
}

func describeType(fi fs.FileInfo) string {
	switch t := fi.Mode().Type(); {
	case fi.IsDir():
		return "a directory"
	case t == 0:
		return "a regular file"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeDevice != 0:
		return "a device"
	default:
		return "a " + t.String() + " file"
	}
}
