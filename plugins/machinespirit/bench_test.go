package machinespirit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

// BenchmarkRLMTurn is one RLM iteration (a root call, then a context slice
// of 64 bytes) in each mode, from the same checkpoint: what a typed plan
// (JSON parsed, validated, interpreted) costs against a Prolog goal
// (read, walked by the allow-list, rewritten, run). Compare the two
// sub-benchmarks' ns/op.
func BenchmarkRLMTurn(b *testing.B) {
	e := newExecutor(b, testConfig(b, nil))
	for _, mode := range []struct{ graph, reply string }{
		{"rlm_goals", "context_slice(0, 64, S)"},
		{"rlm", plan(step{"op": "slice", "from": 0, "bytes": 64, "as": "s"})},
	} {
		b.Run(mode.graph, func(b *testing.B) {
			h := newFakeHost(1)
			h.workspace["ctx.txt"] = bigContext(1<<16, 10, needle)
			h.model = func(string, int) (string, error) { return mode.reply, nil }
			benchSecondStep(b, e, h, spec(mode.graph, nil, "ctx.txt"))
		})
	}
}

// BenchmarkRLMMapParallel is a map over 8 chunks whose sub-model answers
// after 5 ms, with parallel 1 and 4: the ratio of the two is what the
// bounded parallelism buys.
func BenchmarkRLMMapParallel(b *testing.B) {
	e := newExecutor(b, testConfig(b, nil))
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			h := newFakeHost(1)
			h.workspace["ctx.txt"] = strings.Repeat("x", 8*256)
			reply := plan(step{"op": "partition", "chunk_bytes": 256, "as": "c"},
				step{"op": "map", "over": "c", "prompt": "{{item}}", "parallel": par, "as": "a"})
			h.model = func(p string, _ int) (string, error) {
				if strings.Contains(p, "[rlm sub]") {
					time.Sleep(5 * time.Millisecond)
					return "ok", nil
				}
				return reply, nil
			}
			benchSecondStep(b, e, h, spec("rlm", nil, "ctx.txt"))
		})
	}
}

// benchSecondStep runs a task's first step (the rlm probe) once, then
// times its second step, always from the first step's checkpoint, after
// a few untimed runs of it (the first runs of a worker are slower: without
// them the sub-benchmark that runs first pays for it).
func benchSecondStep(b *testing.B, e *Executor, h *fakeHost, sp []byte) {
	b.Helper()
	res, err := e.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue {
		b.Fatalf("%+v, %v", res, err)
	}
	cp := res.Checkpoint
	step := func() {
		if res, err := e.Step(context.Background(), h, stepReq(sp, cp)); err != nil || res.Outcome != sdk.OutcomeContinue {
			b.Fatalf("%+v, %v", res, err)
		}
	}
	for range 10 {
		step()
	}
	for b.Loop() {
		step()
	}
}
