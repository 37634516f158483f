package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A plugin under a uid of the pool is nobody the filesystem knows: it
// reaches a path only through the "others" bits of the path and of every
// directory above it. Landlock grants nothing the mode bits refuse, so a
// read_write or read_only path it cannot reach would fail at its first
// use, deep inside the plugin; checking at launch fails the start instead,
// with the path, its mode and what to change. POSIX ACLs are not
// consulted: a path reachable only through one is refused.

// Access a pool uid needs: to a read_only path, read (and, for a
// directory or a program, search/exec); to a read_write path, also write.
const (
	reachRead  = 0o4
	reachWrite = 0o2
	reachExec  = 0o1
)

// unreachableError says a path of an executor's confinement is not
// reachable by the uid the plugin runs under.
type unreachableError struct {
	Key, Path, Blocker string
	Mode               os.FileMode
	Need               string
}

func (e *unreachableError) Error() string {
	fix := fmt.Sprintf("chmod o+%s %s", e.Need, e.Blocker)
	if e.Blocker != e.Path {
		fix = fmt.Sprintf("chmod o+x %s", e.Blocker)
	}
	return fmt.Sprintf("%s path %s is not reachable by the plugin's own uid: %s has mode %04o and the plugin is neither its owner nor in its group (%s, or name a user for this executor: [executors.KIND] user)",
		e.Key, e.Path, e.Blocker, e.Mode.Perm(), fix)
}

// reachable checks that a process of no owner and no group may reach
// path, and what its symlinks lead to, through their mode bits with
// access need (reach* bits).
func reachable(key, path string, need uint32) error {
	path = filepath.Clean(path)
	if err := reachableAsNamed(key, path, need); err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		return reachableAsNamed(key, real, need)
	}
	return nil
}

func reachableAsNamed(key, path string, need uint32) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s path %s: %w", key, path, err)
	}
	if fi.IsDir() && need&reachRead != 0 {
		need |= reachExec
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("%s path %s: %w", key, path, err)
		}
		if uint32(st.Mode().Perm())&reachExec == 0 {
			return &unreachableError{Key: key, Path: path, Blocker: dir, Mode: st.Mode(), Need: "x"}
		}
		if dir == "/" || dir == "." {
			break
		}
	}
	if got := uint32(fi.Mode().Perm()) & 0o7; got&need != need {
		return &unreachableError{Key: key, Path: path, Blocker: path, Mode: fi.Mode(), Need: modeLetters(need)}
	}
	return nil
}

func modeLetters(bits uint32) string {
	var b strings.Builder
	for _, l := range []struct {
		bit uint32
		c   byte
	}{{reachRead, 'r'}, {reachWrite, 'w'}, {reachExec, 'x'}} {
		if bits&l.bit != 0 {
			b.WriteByte(l.c)
		}
	}
	return b.String()
}

// checkReachable checks every path c adds to the common policy.
func (c Confinement) checkReachable() error {
	for _, p := range c.ReadOnly {
		need := uint32(reachRead)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			need |= reachExec // a program it runs, such as swipl
		}
		if err := reachable("read_only", p, need); err != nil {
			return err
		}
	}
	for _, p := range c.ReadWrite {
		need := uint32(reachRead | reachWrite)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			need |= reachExec
		}
		if err := reachable("read_write", p, need); err != nil {
			return err
		}
	}
	return nil
}
