package host

import (
	"context"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// BenchmarkStepOverhead measures the durable step overhead of the test
// executor's no-op step against a floor measured in the same run: one gRPC
// round trip through go-plugin plus one store commit. It reports the median
// of each and their ratio (target ≤ 2).
func BenchmarkStepOverhead(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run(sync, func(b *testing.B) { benchStepOverhead(b, sync) })
	}
}

func benchStepOverhead(b *testing.B, sync string) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "thb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	h, err := Open(ctx, Options{DataDir: dir, Config: testConfig(b), ExecutorDir: executorDir(b), Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(ctx)
	h.Runner.set.Caps.Steps = 1 << 40

	// The floor: a Describe round trip and a one-row commit, per iteration.
	ec, err := h.Registry.Launch(ctx, "testexec", plugin.NoServices{})
	if err != nil {
		b.Fatal(err)
	}
	defer ec.Stop()
	// A task parked in a long step: a heartbeat on it is a one-row commit.
	floorTask, err := h.Runner.Create(ctx, alice, CreateRequest{Executor: "testexec", Spec: []byte(`{"goal":"floor","testexec":{"sleep_ms":600000}}`)})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Runner.Cancel(ctx, alice, floorTask.ID)
	n := max(b.N, 50)
	floor := make([]time.Duration, n)
	for i := range floor {
		start := time.Now()
		if _, err := ec.Describe(ctx); err != nil {
			b.Fatal(err)
		}
		if err := h.Store.Heartbeat(ctx, alice, floorTask.ID, floorTask.RunID, int64(i)); err != nil {
			b.Fatal(err)
		}
		floor[i] = time.Since(start)
	}

	// The step: n no-op steps of one task, timed from the step events.
	task, err := h.Runner.Create(ctx, alice, CreateRequest{Executor: "testexec", Spec: []byte(`{"goal":"bench","testexec":{"steps":` + strconv.Itoa(n+1) + `}}`), Limits: Limits{Steps: int64(n + 1)}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	waitRun(b, h, task.ID)
	total := time.Since(start)
	b.StopTimer()
	got, err := h.Runner.Get(ctx, alice, task.ID)
	if err != nil || got.Status != store.StatusCompleted {
		b.Fatalf("bench task: %s %s %v", got.Status, got.Message, err)
	}
	atts, err := h.Runner.Attempts(ctx, alice, task.ID)
	if err != nil {
		b.Fatal(err)
	}
	// Attempt spans cover claim → finish; the gaps between them are the
	// rest of the loop. Step-to-step intervals capture both.
	steps := make([]time.Duration, 0, len(atts)-1)
	for i := 1; i < len(atts); i++ {
		steps = append(steps, atts[i].StartedAt.Sub(atts[i-1].StartedAt))
	}
	fm, sm := median(floor), median(steps)
	b.ReportMetric(float64(fm.Microseconds()), "floor-µs")
	b.ReportMetric(float64(sm.Microseconds()), "step-µs")
	b.ReportMetric(float64(sm)/float64(fm), "ratio")
	b.ReportMetric(float64(total.Microseconds())/float64(n+1), "mean-step-µs")
}

func waitRun(b *testing.B, h *Host, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := h.Runner.Wait(ctx, id); err != nil {
		b.Fatal(err)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
