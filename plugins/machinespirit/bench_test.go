package machinespirit

import (
	"context"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// BenchmarkNodeStep is the per-node overhead of a step: a no-op node, its
// checkpoint decoded, checked and re-encoded by the worker, one run frame
// and one result frame.
func BenchmarkNodeStep(b *testing.B) {
	src := g("noop_loop", okState, `nodes([node(a, noop, [max_visits(1000000)])])`,
		`edges([edge(start, a), conditional(a, always(again), [route(again, a), route(done, end)])])`,
		`limits([max_node_executions(1000000)])`)
	e := newExecutor(b, testConfig(b, map[string]string{"noop_loop": src}))
	h := newFakeHost(1)
	sp := spec("noop_loop", nil, "")
	var cp *sdk.Checkpoint
	b.ReportAllocs()
	for b.Loop() {
		res, err := e.Step(context.Background(), h, stepReq(sp, cp))
		if err != nil || res.Outcome != sdk.OutcomeContinue {
			b.Fatalf("%+v, %v", res, err)
		}
		cp = res.Checkpoint
	}
}

// BenchmarkWorkerStart is the start of a worker up to its hello (and the
// load of no operator graph), from the saved state and from source.
func BenchmarkWorkerStart(b *testing.B) {
	for _, mode := range []StartMode{StartFromState, StartFromSource} {
		b.Run(string(mode), func(b *testing.B) {
			cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StartMode: mode}
			e := newExecutor(b, cfg)
			for b.Loop() {
				w, _, err := helloWorker(context.Background(), e.cfg, e.env)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				w.close(e.cfg.KillGrace)
				b.StartTimer()
			}
		})
	}
}
