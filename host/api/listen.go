package api

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/taskhost/taskhost/host/config"
)

// SocketName is the API socket's file name in the data dir.
const SocketName = "taskhost.sock"

// maxSocketPath is the longest unix socket path Linux accepts (108 bytes
// including the terminating NUL).
const maxSocketPath = 107

// SocketPath is the API socket of dataDir.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, SocketName) }

// ListenUnix listens on the API socket of dataDir. The caller must hold the
// data dir's lock (daemon.Open), so a socket file already there is a stale one
// and is replaced.
//
// With gid < 0 the data dir is made 0700 and the socket 0600: only the
// daemon's user (and root) can connect. With gid >= 0 the members of that
// group may connect too: the data dir becomes 0710 (enter, not list) and the
// socket 0660, both of group gid, and every other entry of the data dir loses
// its group and other permissions, so the group reaches the socket and
// nothing else.
func ListenUnix(dataDir string, gid int) (*net.UnixListener, error) {
	path := SocketPath(dataDir)
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("api socket path %s is %d bytes: unix socket paths are capped at %d; use a data dir with a shorter path", path, len(path), maxSocketPath)
	}
	// Closed while the socket is created, opened to the group afterwards.
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("api socket: data dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("api socket: %s exists and is not a socket: move it away", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("api socket: remove stale %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("api socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("api socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	fail := func(err error) (*net.UnixListener, error) {
		ln.Close()
		return nil, fmt.Errorf("api socket: %w", err)
	}
	if gid < 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return fail(err)
		}
		return ln, nil
	}
	if err := closeToGroup(dataDir); err != nil {
		return fail(err)
	}
	if err := os.Lchown(path, -1, gid); err != nil {
		return fail(err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return fail(err)
	}
	if err := os.Lchown(dataDir, -1, gid); err != nil {
		return fail(err)
	}
	if err := os.Chmod(dataDir, 0o710); err != nil {
		return fail(err)
	}
	return ln, nil
}

// closeToGroup removes the group and other permissions of every entry of dir
// but the socket.
func closeToGroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == SocketName || e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if m := fi.Mode().Perm(); m&0o077 != 0 {
			if err := os.Chmod(filepath.Join(dir, e.Name()), m&0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// ListenTCP listens on addr for the token listener. addr must be a loopback
// IP and port; the address actually bound is checked again.
func ListenTCP(addr string) (net.Listener, error) {
	if err := config.CheckLoopback(addr); err != nil {
		return nil, fmt.Errorf("api tcp listener %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api tcp listener: %w", err)
	}
	if err := config.CheckLoopback(ln.Addr().String()); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api tcp listener: bound %s: %w", ln.Addr(), err)
	}
	return ln, nil
}
