package machinespirit

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// A bounded swipl run (the version check, the saved state's build) must
// outlive the OS thread it happened to be forked from: its Pdeathsig
// fires when that thread ends, and a goroutine that locks a thread and
// returns without unlocking ends it. Here goroutines that do so churn
// the runtime's threads while a command runs; before runBounded ran its
// command on a thread of its own, the command was SIGKILLed ("signal:
// killed") when another test's worker goroutine ended on the thread.
func TestBoundedRunOutlivesItsForkingThread(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				done := make(chan struct{})
				go func() {
					runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
					close(done)
				}()
				<-done
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := runBounded(ctx, "/bin/sh", []string{"-c", "sleep 0.2; echo ok"}, workerEnv(t.TempDir()), t.TempDir())
		cancel()
		if err != nil || out != "ok\n" {
			t.Fatalf("run %d: %q, %v; want it to complete", i, out, err)
		}
	}
}
