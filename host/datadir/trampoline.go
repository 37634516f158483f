package datadir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// TrampolineName is the dedicated plugins' trampoline (cmd/taskhost-confine)
// the host looks for in its executor directory.
const TrampolineName = "taskhost-confine"

// trampoline is the dedicated taskhost-confine the host found, opened once:
// every plugin and command starts through that open file (execPath), never
// its path again, so replacing the file — say, in an install dir someone
// else may write — runs nothing else, as a pinned plugin's fd does.
type trampoline struct {
	path   string   // where it was found (for machinespirit's worker and logs)
	f      *os.File // the inode checked and hashed
	sha256 string
}

// execPath is the open file as a path the kernel resolves to it:
// /proc/self/fd/N, with N well above the few fds a launch hands its child
// (os/exec renumbers those from 3 before the exec, and must not land on N).
func (t *trampoline) execPath() string { return fmt.Sprintf("/proc/self/fd/%d", t.f.Fd()) }

func (t *trampoline) close() error {
	if t == nil {
		return nil
	}
	return t.f.Close()
}

// trampolineFD is the lowest fd number the open trampoline is moved to.
const trampolineFD = 256

// findTrampoline opens the trusted taskhost-confine in dir, or returns nil
// when there is none; the caller then uses its own binary, which serves as
// a trampoline too, only slower to start.
//
// The trampoline runs with the host's privileges before it confines
// anything, so one that someone else could have written is refused: it
// must be a regular, executable file (a symlink is followed), owned by
// root or by the host's uid, and writable by neither group nor others —
// checked on the open file, which is then hashed and kept. A refused one
// is an error that says what to fix; the host then warns and uses its own
// binary.
func findTrampoline(dir string) (*trampoline, error) {
	path := filepath.Join(dir, TrampolineName)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin trampoline %s: %w", path, err)
	}
	t, err := checkTrampoline(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return t, nil
}

func checkTrampoline(path string, f *os.File) (*trampoline, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("plugin trampoline %s: %w", path, err)
	}
	refuse := func(found, fix string) error {
		return fmt.Errorf("plugin trampoline %s %s: not used; %s", path, found, fix)
	}
	if !fi.Mode().IsRegular() {
		return nil, refuse("is not a regular file", "remove it or put `make build`'s binary there")
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return nil, refuse(fmt.Sprintf("is not executable (mode %04o)", fi.Mode().Perm()), "run: chmod 755 "+path)
	}
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return nil, refuse(fmt.Sprintf("has mode %04o: it is writable by group or others", m), "run: chmod go-w "+path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, refuse("has no owner information", "put it on a local POSIX file system")
	}
	if euid := os.Geteuid(); st.Uid != 0 && int(st.Uid) != euid {
		return nil, refuse(fmt.Sprintf("is owned by uid %d, neither root nor this daemon's uid %d", st.Uid, euid), "run: chown root "+path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("plugin trampoline %s: %w", path, err)
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, trampolineFD)
	if err != nil {
		return nil, fmt.Errorf("plugin trampoline %s: %w", path, err)
	}
	f.Close()
	return &trampoline{path: path, f: os.NewFile(uintptr(fd), path), sha256: hex.EncodeToString(h.Sum(nil))}, nil
}
