package sdk

import (
	"context"
	"errors"
	"sync"
	"time"
)

var (
	errStepRunning = errors.New("a step is already running in this plugin process")
	errStopping    = errors.New("the plugin is stopping")
)

// stepGate admits one step at a time and ends them when the plugin stops.
//
// The executor contract promises one step at a time, so a second
// concurrent Step is a host bug: it is refused rather than queued, so that
// it shows instead of racing on executor state. Stopping (SIGTERM, or the
// host's death) cancels the running step's context and gives the executor
// a bounded time to return, so that it can stop what it started (kill a
// worker process, say) before the plugin exits.
type stepGate struct {
	mu sync.Mutex
	// running is non-nil while a step runs and is closed when it returns.
	running chan struct{}
	stopped bool

	stopCtx context.Context
	stopAll context.CancelFunc
}

func newStepGate() *stepGate {
	ctx, cancel := context.WithCancel(context.Background())
	return &stepGate{stopCtx: ctx, stopAll: cancel}
}

// enter admits a step. It returns the step's context, which also ends when
// the plugin stops, and leave, to call when the step has returned.
func (g *stepGate) enter(ctx context.Context) (stepCtx context.Context, leave func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return nil, nil, errStopping
	}
	if g.running != nil {
		return nil, nil, errStepRunning
	}
	done := make(chan struct{})
	g.running = done
	stepCtx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(g.stopCtx, cancel)
	return stepCtx, func() {
		unhook()
		cancel()
		g.mu.Lock()
		g.running = nil
		g.mu.Unlock()
		close(done)
	}, nil
}

// stop refuses new steps, cancels the running one and waits up to timeout
// for it to return. It reports whether no step is left running.
func (g *stepGate) stop(timeout time.Duration) bool {
	g.mu.Lock()
	g.stopped = true
	running := g.running
	g.mu.Unlock()
	g.stopAll()
	if running == nil {
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-running:
		return true
	case <-t.C:
		return false
	}
}
