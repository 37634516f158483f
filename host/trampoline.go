package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// TrampolineName is the dedicated plugins' trampoline (cmd/taskhost-confine)
// the host looks for in its executor directory.
const TrampolineName = "taskhost-confine"

// findTrampoline returns the path of a trusted taskhost-confine in dir, or
// "" when there is none; the caller then uses its own binary, which
// serves as a trampoline too, only slower to start.
//
// The trampoline runs with the host's privileges before it confines
// anything, so one that someone else could have written is refused: it
// must be a regular, executable file (a symlink is followed), owned by
// root or by the host's uid, and writable by neither group nor others.
// A refused one is an error that says what to fix; the host then warns
// and uses its own binary.
func findTrampoline(dir string) (string, error) {
	path := filepath.Join(dir, TrampolineName)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("plugin trampoline %s: %w", path, err)
	}
	refuse := func(found, fix string) error {
		return fmt.Errorf("plugin trampoline %s %s: not used; %s", path, found, fix)
	}
	if !fi.Mode().IsRegular() {
		return "", refuse("is not a regular file", "remove it or put `make build`'s binary there")
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", refuse(fmt.Sprintf("is not executable (mode %04o)", fi.Mode().Perm()), "run: chmod 755 "+path)
	}
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return "", refuse(fmt.Sprintf("has mode %04o: it is writable by group or others", m), "run: chmod go-w "+path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", refuse("has no owner information", "put it on a local POSIX file system")
	}
	if euid := os.Geteuid(); st.Uid != 0 && int(st.Uid) != euid {
		return "", refuse(fmt.Sprintf("is owned by uid %d, neither root nor this daemon's uid %d", st.Uid, euid), "run: chown root "+path)
	}
	return path, nil
}
