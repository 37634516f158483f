package sdk

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestStepGate(t *testing.T) {
	g := newStepGate()
	ctx, leave, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.enter(context.Background()); !errors.Is(err, errStepRunning) {
		t.Fatalf("second enter = %v, want errStepRunning", err)
	}
	leave()
	if ctx.Err() == nil {
		t.Error("a step's context must end when the step has returned")
	}
	_, leave, err = g.enter(context.Background())
	if err != nil {
		t.Fatalf("enter after leave: %v", err)
	}
	leave()
}

func TestStepGateStop(t *testing.T) {
	g := newStepGate()
	ctx, leave, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The step returns once its context ends, as an executor should.
	go func() {
		<-ctx.Done()
		leave()
	}()
	if !g.stop(10 * time.Second) {
		t.Fatal("stop did not see the step return")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("step context = %v, want cancelled", ctx.Err())
	}
	if _, _, err := g.enter(context.Background()); !errors.Is(err, errStopping) {
		t.Errorf("enter after stop = %v, want errStopping", err)
	}
}

// stop waits for a step that ignores its context for exactly the timeout
// and then gives up; one that returns a moment before the timeout is seen.
func TestStepGateStopTimesOut(t *testing.T) {
	const timeout = 10 * time.Second
	for _, tc := range []struct {
		name     string
		returnIn time.Duration // 0: never
		done     bool
		took     time.Duration
	}{
		{"never returns", 0, false, timeout},
		{"returns just in time", timeout - time.Millisecond, true, timeout - time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newStepGate()
				_, leave, err := g.enter(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if tc.returnIn > 0 {
					go func() {
						time.Sleep(tc.returnIn)
						leave()
					}()
				} else {
					defer leave()
				}
				start := time.Now()
				if got := g.stop(timeout); got != tc.done {
					t.Fatalf("stop = %v, want %v", got, tc.done)
				}
				if d := time.Since(start); d != tc.took {
					t.Errorf("stop returned after %v, want %v", d, tc.took)
				}
			})
		})
	}
}

func TestStepGateStopIdle(t *testing.T) {
	if !newStepGate().stop(0) {
		t.Fatal("stop of an idle gate must report done")
	}
}
