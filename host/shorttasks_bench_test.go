package host

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
)

// BenchmarkShortTasks runs one-step tasks, create → completed, from 8
// clients at once, on a host without pre-started plugins and on one with
// (prestart 8), in interleaved rounds, and reports each one's tasks/s and
// their ratio (the target: ≥ 100 tasks/s and ≥ 4×).
func BenchmarkShortTasks(b *testing.B) {
	const clients, perClient = 8, 25
	open := func(prestart int) *Host {
		cfg := testConfig(b)
		cfg.Tasks.Prestart = prestart
		h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(b), Config: cfg, ExecutorDir: executorDir(b)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close(context.Background()) })
		return h
	}
	off, on := open(0), open(8)
	run := func(h *Host) (perSec float64, lat, stop time.Duration) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var lats, stops []time.Duration
		start := time.Now()
		for range clients {
			wg.Go(func() {
				for range perClient {
					t0 := time.Now()
					task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: []byte(`{"goal":"one step","testexec":{"steps":1}}`)})
					if err != nil {
						b.Error(err)
						return
					}
					waitEvent(b, h, task.ID, EventTaskCompleted)
					t1 := time.Now()
					if err := h.Runner.Wait(context.Background(), task.ID); err != nil {
						b.Error(err)
					}
					mu.Lock()
					lats, stops = append(lats, t1.Sub(t0)), append(stops, time.Since(t1))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return float64(clients*perClient) / time.Since(start).Seconds(), median(lats), median(stops)
	}
	var offRate, onRate float64
	for b.Loop() {
		r0, l0, s0 := run(off)
		r1, l1, s1 := run(on)
		offRate, onRate = r0, r1
		b.Logf("prestart off: %.0f tasks/s, create→completed %v, completed→run over %v; prestart 8: %.0f tasks/s, %v, %v", r0, l0, s0, r1, l1, s1)
	}
	b.Logf("pool: %+v", on.Registry.PoolStatus("testexec"))
	b.ReportMetric(offRate, "tasks/s-off")
	b.ReportMetric(onRate, "tasks/s-on")
	b.ReportMetric(onRate/offRate, "ratio")
	_ = config.MaxPrestart
}

// waitEvent waits for task id's first event of type typ.
func waitEvent(tb testing.TB, h *Host, id, typ string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var after int64
	for {
		evs, err := h.Runner.Events(ctx, alice, id, after)
		if err != nil {
			tb.Fatalf("task %s: no %s event: %v", id, typ, err)
		}
		for _, ev := range evs {
			after = ev.Seq
			if ev.Type == typ {
				return
			}
		}
	}
}
