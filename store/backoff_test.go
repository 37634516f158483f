package store

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A lost race waits a doubling, jittered delay: try n waits in
// [2^n, 2^(n+1)) ms, from try 7 on in [128, 256) ms; a cancelled context
// ends the wait at once. The bubble's clock makes each wait exact.
func TestBackoffDoublesWithJitterAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for try := range 10 {
			base := time.Duration(1<<min(try, 7)) * time.Millisecond
			for range 20 {
				start := time.Now()
				if err := backoff(context.Background(), try); err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d < base || d >= 2*base {
					t.Fatalf("try %d waited %v, want [%v, %v)", try, d, base, 2*base)
				}
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Millisecond)
			cancel()
		}()
		start := time.Now()
		if err := backoff(ctx, 7); !errors.Is(err, context.Canceled) {
			t.Fatalf("backoff under a cancelled context = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != time.Millisecond {
			t.Errorf("the cancelled backoff returned after %v, want at the cancel (1ms)", d)
		}
	})
}
