package machinespirit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/sdk"
)

// testWriter logs through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// noLimits lifts the node limits so that only the cancel can stop a node.
const noLimits = `limits([node_seconds(3600), node_inferences(2000000000)])`

// TestCancel: a cancelled step returns promptly whatever the node does. A
// node that loops forever (repeat, fail) is reached by thread_signal and
// the worker survives; one that swallows the signal and ignores SIGTERM is
// killed; one waiting for an effect is released.
func TestCancel(t *testing.T) {
	t.Parallel()
	graphs := map[string]string{
		"spins":    g("spins", okState, `nodes([node(a, spin)])`, okEdges, noLimits),
		"stubborn": g("stubborn", okState, `nodes([node(a, stubborn)])`, okEdges, noLimits),
		"waits":    g("waits", okState, `nodes([node(a, effect_then_spin)])`, okEdges, noLimits),
	}
	tests := []struct {
		graph       string
		workerLives bool
		maxReturn   time.Duration
	}{
		{"spins", true, 300 * time.Millisecond},
		{"waits", true, 300 * time.Millisecond},
		// cancel grace + SIGTERM grace, then SIGKILL
		{"stubborn", false, DefaultCancelGrace + DefaultKillGrace + 500*time.Millisecond},
	}
	e := newExecutor(t, testConfig(t, graphs))
	for _, tc := range tests {
		t.Run(tc.graph, func(t *testing.T) {
			w, err := e.ensureWorker(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancelled := make(chan time.Time, 1)
			time.AfterFunc(300*time.Millisecond, func() { cancelled <- time.Now(); cancel() })
			res, err := e.Step(ctx, newFakeHost(1), stepReq(spec(tc.graph, nil, ""), nil))
			returned := time.Now()
			cancelledAt := <-cancelled
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("step: %+v, %v; want context.Canceled", res, err)
			}
			d := returned.Sub(cancelledAt)
			t.Logf("returned %v after the cancel", d)
			if d > tc.maxReturn {
				t.Fatalf("the step returned %v after the cancel, want at most %v", d, tc.maxReturn)
			}
			if alive := processAlive(w.pid); alive != tc.workerLives {
				t.Fatalf("worker alive = %v, want %v", alive, tc.workerLives)
			}
			// The next step of the task works either way.
			res, err = e.Step(context.Background(), newFakeHost(1), stepReq(parSpec(), nil))
			if err != nil || res.Outcome != sdk.OutcomeContinue {
				t.Fatalf("next step: %+v, %v", res, err)
			}
		})
	}
}

// TestCancelRaces cancels quick steps at many points of their life: every
// run must get exactly one answer, so the worker is never killed for
// ignoring a cancel and the next step is never confused by a stale one.
func TestCancelRaces(t *testing.T) {
	t.Parallel()
	src := g("quick", okState, `nodes([node(a, patch([count=1]), [max_visits(1000000)])])`,
		`edges([edge(start, a), conditional(a, always(again), [route(again, a), route(done, end)])])`,
		`limits([max_node_executions(1000000)])`)
	cfg := testConfig(t, map[string]string{"quick": src})
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Debug})
	e := newExecutor(t, cfg)
	w, err := e.ensureWorker(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sp := spec("quick", nil, "")
	var cp *sdk.Checkpoint
	completed, cancelled := 0, 0
	for i := range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%40)*25*time.Microsecond)
		res, err := e.Step(ctx, newFakeHost(1), stepReq(sp, cp))
		cancel()
		switch {
		case err == nil && res.Outcome == sdk.OutcomeContinue:
			completed++
			cp = res.Checkpoint
		case errors.Is(err, context.DeadlineExceeded):
			cancelled++
		default:
			t.Fatalf("step %d: %+v, %v", i, res, err)
		}
	}
	if e.workerPID() != w.pid {
		t.Fatal("the worker was killed: a cancelled run went unanswered")
	}
	if p := payload(t, cp); p["executions"] != float64(completed) {
		t.Fatalf("checkpoint counts %v executions, %d steps completed", p["executions"], completed)
	}
	t.Logf("%d completed, %d cancelled", completed, cancelled)
}
