package tools

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/taskhost/taskhost/host/config"
)

func TestSleepLimits(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil) // time.sleep timeout: 60 s
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name    string
		seconds float64
		ok      bool
	}{
		{"zero", 0, true},
		{"at the timeout", 60, true},
		{"past the timeout", 60.001, false},
		{"negative", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A cancelled context shows the arguments were accepted
			// without sleeping: Call validates before it runs anything.
			_, err := callTool(t, cancelled, r, ToolTimeSleep, map[string]any{"seconds": tt.seconds})
			if tt.ok && !errors.Is(err, context.Canceled) {
				t.Fatalf("error = %v, want context.Canceled (arguments accepted)", err)
			}
			if !tt.ok {
				wantArgError(t, err, "seconds", "0..60")
			}
		})
	}
	var out struct{ Slept float64 }
	mustCall(t, r, ToolTimeSleep, map[string]any{"seconds": 0}, &out)
	if out.Slept != 0 {
		t.Fatalf("slept = %v", out.Slept)
	}
}

// TestSleepForTheWholeTimeout sleeps for exactly the tool's timeout (1 s):
// that is allowed, so it must succeed rather than time out. In a synctest
// bubble a sleep takes exactly its time, and the whole timeout's ends on
// the very instant the tool's deadline fires.
func TestSleepForTheWholeTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newTestRegistry(t, map[string]config.Tool{ToolTimeSleep: {Enabled: true, Approval: config.ApprovalNever, TimeoutSeconds: 1}})
		for _, secs := range []float64{0.25, 1} {
			start := time.Now()
			var out struct{ Slept float64 }
			mustCall(t, r, ToolTimeSleep, map[string]any{"seconds": secs}, &out)
			if out.Slept != secs {
				t.Fatalf("slept = %v, want %v", out.Slept, secs)
			}
			if d, want := time.Since(start), time.Duration(secs*float64(time.Second)); d != want {
				t.Errorf("a sleep of %gs took %v", secs, d)
			}
		}
	})
}

func TestSleepCancel(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan callResult, 1)
	go func() {
		res, err := r.Call(ctx, Env{TaskID: testTask}, ToolTimeSleep, args(t, map[string]any{"seconds": 59}))
		done <- callResult{res, err}
	}()
	cancel()
	if got := recvResult(t, done); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", got.err)
	}
}
