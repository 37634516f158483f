package tools

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/internal/uids"
)

// A shell.run command runs under a uid of its own (internal/uids) and must
// write its workspace as that uid; the host's tools, backup, restore and
// delete keep working on it as the daemon. So the workspace changes hands
// around each command: chownTree gives every entry beneath it to the
// command's uid before the command starts, and back to the daemon once every
// process of that uid is gone, clearing set-id bits and any group or other
// write bit the command set. The walk opens each directory from its parent's
// descriptor with O_NOFOLLOW and changes entries with AT_SYMLINK_NOFOLLOW:
// a symlink the command planted is changed itself, never its target, and
// nothing outside the workspace is reached.

// maxOwnedEntries bounds one walk; a workspace is bounded in bytes
// (MaxWorkspaceBytes), and this bounds it in entries.
const maxOwnedEntries = 1 << 20

// ownership is what chownTree gives each entry.
type ownership struct {
	uid, gid int
	// handBack also clears set-id bits and group/other write bits, and
	// makes the workspace's own directory 0700.
	handBack bool
}

// chownTree gives dir and everything beneath it to o.
func chownTree(dir string, o ownership) error {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("workspace ownership: open %s: %w", dir, err)
	}
	if err := unix.Fchown(fd, o.uid, o.gid); err != nil {
		unix.Close(fd)
		return fmt.Errorf("workspace ownership: %s: %w", dir, err)
	}
	if o.handBack {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			unix.Close(fd)
			return fmt.Errorf("workspace ownership: %s: %w", dir, err)
		}
	}
	n := 0
	err = chownBeneath(fd, dir, o, &n)
	unix.Close(fd)
	return err
}

// chownBeneath changes the entries of directory fd (at path, for errors)
// and recurses into its subdirectories; it closes nothing of the caller's.
func chownBeneath(fd int, path string, o ownership, n *int) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return fmt.Errorf("workspace ownership: %s: %w", path, err)
	}
	entries, err := readDirNames(dup)
	if err != nil {
		return fmt.Errorf("workspace ownership: read %s: %w", path, err)
	}
	for _, name := range entries {
		if *n++; *n > maxOwnedEntries {
			return fmt.Errorf("workspace ownership: %s holds more than %d entries", path, maxOwnedEntries)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("workspace ownership: %s/%s: %w", path, name, err)
		}
		if err := unix.Fchownat(fd, name, o.uid, o.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("workspace ownership: %s/%s: %w", path, name, err)
		}
		kind := st.Mode & unix.S_IFMT
		if o.handBack && kind != unix.S_IFLNK {
			// fchmodat cannot refuse to follow a link before Linux 6.6;
			// this entry was just found not to be one, and the command
			// that could swap it is gone.
			if mode := st.Mode & 0o7777; mode&(unix.S_ISUID|unix.S_ISGID|0o022) != 0 {
				if err := unix.Fchmodat(fd, name, mode&^(unix.S_ISUID|unix.S_ISGID|0o022), 0); err != nil && !errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("workspace ownership: %s/%s: %w", path, name, err)
				}
			}
		}
		if kind != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("workspace ownership: %s/%s: %w", path, name, err)
		}
		err = chownBeneath(sub, path+"/"+name, o, n)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// readDirNames reads the names in directory fd and closes it.
func readDirNames(fd int) ([]string, error) {
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// ownUID gives workspace dir to a uid of its own from the registry's pool
// for one command, and returns it with handBack, which kills whatever still
// runs under that uid, gives the workspace back to the daemon and returns
// the uid to the pool. Without a pool it returns 0 (the daemon's uid) and a
// no-op.
func (r *Registry) ownUID(dir string) (uid int, handBack func(), err error) {
	if r.uids == nil {
		return 0, func() {}, nil
	}
	uid, err = r.uids.Acquire()
	if err != nil {
		return 0, nil, fmt.Errorf("shell.run: no uid to run the command under: %w", err)
	}
	back := func() error {
		if err := uids.KillAll(uid); err != nil {
			return err
		}
		if err := chownTree(dir, ownership{uid: unix.Geteuid(), gid: unix.Getegid(), handBack: true}); err != nil {
			return err
		}
		return r.uids.Release(uid)
	}
	if err := chownTree(dir, ownership{uid: uid, gid: uid}); err != nil {
		if berr := back(); berr != nil {
			err = errors.Join(err, berr)
		}
		return 0, nil, err
	}
	return uid, func() {
		if err := back(); err != nil {
			// The uid stays out of the pool: a process or a file of the
			// command may still hold it.
			r.log.Error("shell.run: workspace not handed back to the daemon; its uid is kept out of the pool", "workspace", dir, "uid", uid, "error", err)
		}
	}, nil
}

// ErrUntrustedWorkspace: a task's workspace is not one the host trusts (a
// symlink, not a directory, another uid's, writable by group or others);
// that task's tools refuse it, and it cannot be resumed, until it is fixed.
// Only that task is affected: the daemon and every other task go on.
var ErrUntrustedWorkspace = errors.New("tools: the task's workspace is untrusted")

// WorkspaceError says what is wrong with a task's workspace and the fix.
type WorkspaceError struct {
	TaskID, Path, Found, Fix string
}

func (e *WorkspaceError) Error() string {
	return fmt.Sprintf("task %s's workspace %s %s: the task cannot run until it is fixed; %s", e.TaskID, e.Path, e.Found, e.Fix)
}

func (e *WorkspaceError) Is(target error) bool { return target == ErrUntrustedWorkspace }

// CheckWorkspace reports, as a *WorkspaceError, a workspace of taskID the
// host would not use: it must be a directory (not a symlink) owned by the
// daemon — or, while a command runs in it, by that command's uid — and not
// writable by group or others. A workspace not made yet is fine.
func (r *Registry) CheckWorkspace(taskID string) error {
	path := filepath.Join(r.root, taskID)
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("workspace %s: %w", path, err)
	}
	bad := func(found, fix string) error {
		return &WorkspaceError{TaskID: taskID, Path: path, Found: found, Fix: fix}
	}
	switch mode := st.Mode & unix.S_IFMT; {
	case mode == unix.S_IFLNK:
		return bad("is a symlink", "remove the link (the host follows no link in its data dir), then resume the task")
	case mode != unix.S_IFDIR:
		return bad("is not a directory", "move it aside, then resume the task")
	case int(st.Uid) != unix.Geteuid() && (r.uids == nil || !r.uids.Range().Contains(int(st.Uid))):
		return bad(fmt.Sprintf("is owned by uid %d, not by the daemon's uid %d", st.Uid, unix.Geteuid()),
			fmt.Sprintf("run: chown -R %d %s", unix.Geteuid(), path))
	case st.Mode&0o022 != 0:
		return bad(fmt.Sprintf("has mode %04o: it is writable by group or others", st.Mode&0o7777), "run: chmod go-w "+path)
	}
	return nil
}
