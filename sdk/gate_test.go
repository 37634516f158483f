package sdk

import (
	"context"
	"errors"
	"testing"
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

func TestStepGateStopTimesOut(t *testing.T) {
	g := newStepGate()
	_, leave, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	// The step ignores its context: stop gives up after the timeout.
	if g.stop(time.Millisecond) {
		t.Fatal("stop reported a step that never returned as done")
	}
}

func TestStepGateStopIdle(t *testing.T) {
	if !newStepGate().stop(0) {
		t.Fatal("stop of an idle gate must report done")
	}
}
