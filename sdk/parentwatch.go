package sdk

import (
	"context"
	"time"
)

// parentWatch notices that the process that started the plugin is gone.
//
// The host sets a parent-death signal on the plugin, but that signal fires
// when the forking *thread* exits and is lost if the host forked from a
// thread that lives on; a plugin that outlives its host would keep a task's
// effects going with nobody to record them. When the parent dies the kernel
// reparents the plugin (to init or a subreaper), so a changed parent pid is
// the host's death, whatever killed it.
//
// Where the kernel gives a pidfd of the parent, the watch waits on it and
// costs nothing while the parent lives; elsewhere it polls every interval.
type parentWatch struct {
	getppid  func() int
	interval time.Duration
	parent   int
	// exited, when set, blocks until process pid exits (waitExit); nil,
	// or its errNoPidfd, leaves the watch to polling.
	exited func(ctx context.Context, pid int, still func() bool) error
}

// newParentWatch records the current parent at once, so that a parent that
// dies right after start-up is still noticed.
func newParentWatch(getppid func() int, interval time.Duration) *parentWatch {
	return &parentWatch{getppid: getppid, interval: interval, parent: getppid()}
}

// wait blocks until the parent pid differs from the one recorded at start,
// and returns the new one, or until ctx is done.
func (w *parentWatch) wait(ctx context.Context) (int, error) {
	if w.exited != nil {
		err := w.exited(ctx, w.parent, func() bool { return w.getppid() == w.parent })
		if ctxErr := ctx.Err(); ctxErr != nil {
			return 0, ctxErr
		}
		// The kernel reparents the children before it tells the parent's
		// exit; should a read still name the old parent, the poll below
		// sees the change.
		if p := w.getppid(); err == nil && p != w.parent {
			return p, nil
		}
	}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
			if p := w.getppid(); p != w.parent {
				return p, nil
			}
		}
	}
}
