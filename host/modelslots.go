package host

import (
	"context"
	"fmt"
)

// DefaultMaxParallelModelCalls is [tasks] max_parallel_model_calls'
// default: a step's model calls in flight at once.
const DefaultMaxParallelModelCalls = 4

// modelSlots bounds the model calls of one step in flight at once, for
// every executor: a call past the bound waits for a slot rather than being
// refused, as an executor's parallel map would otherwise fail for asking.
// How many may wait is bounded by the protocol's calls in flight per step
// (steprpc.MaxCallsInFlight, 32): a plugin that sends more breaks the
// protocol and is stopped.
type modelSlots chan struct{}

func newModelSlots(n int) modelSlots {
	if n <= 0 {
		n = DefaultMaxParallelModelCalls
	}
	return make(modelSlots, n)
}

// acquire waits for a slot, or for ctx to end; the slot is the caller's
// until it calls release. A context already ended takes no slot, even one
// that is free: a cancelled step starts no call.
func (s modelSlots) acquire(ctx context.Context) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model call not started: %w", err)
	}
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("model call not started while it waited for one of the step's %d model call slots: %w", cap(s), ctx.Err())
	}
}
