//go:build linux

package sdk

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// errNoPidfd is a kernel (before 5.3) or a sandbox that gives no pidfd: the
// caller falls back to polling.
var errNoPidfd = errors.New("no pidfd for the parent")

// waitExit blocks until process pid exits, or ctx ends, without polling: a
// pidfd becomes readable when its process exits, and the runtime's poller
// waits on it with the plugin's other fds. still, called once the pidfd is
// open, says pid is still the process meant (not one that reused the pid
// of one gone before the open); when it is not, waitExit returns at once.
// It returns errNoPidfd when no pidfd could be had.
func waitExit(ctx context.Context, pid int, still func() bool) error {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return errNoPidfd
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	if !still() {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return errNoPidfd
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	var pollErr error
	err = rc.Read(func(fd uintptr) bool {
		// Called at once and again whenever the poller says readable:
		// done when poll(2) agrees the process has exited.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		if err != nil && err != unix.EINTR {
			pollErr = err
			return true
		}
		return n > 0
	})
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil || pollErr != nil {
		// The poller refused the fd: poll instead.
		return errNoPidfd
	}
	return nil
}
