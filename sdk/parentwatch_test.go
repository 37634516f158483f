package sdk

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

func TestParentWatch(t *testing.T) {
	var ppid, calls atomic.Int64
	ppid.Store(100)
	getppid := func() int {
		calls.Add(1)
		return int(ppid.Load())
	}
	w := newParentWatch(getppid, time.Millisecond)
	if w.parent != 100 {
		t.Fatalf("recorded parent %d, want 100", w.parent)
	}

	// While the parent stays, wait keeps polling and only ctx ends it.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := w.wait(ctx)
		done <- err
	}()
	waitFor(t, "several polls", func() bool { return calls.Load() >= 5 })
	select {
	case err := <-done:
		t.Fatalf("wait returned %v while the parent was alive", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after cancel = %v, want context.Canceled", err)
	}

	// Reparenting (here to a subreaper, pid 42) ends the wait.
	got := make(chan int, 1)
	go func() {
		p, _ := w.wait(context.Background())
		got <- p
	}()
	ppid.Store(42)
	select {
	case p := <-got:
		if p != 42 {
			t.Fatalf("wait = %d, want the new parent 42", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not notice the new parent")
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, cond)
}
