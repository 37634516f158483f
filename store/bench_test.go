package store

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
)

// benchStores are the stores the benchmarks compare: SQLite in both
// synchronous modes and PostgreSQL (on testpg's cluster, whose fsync is off
// unless TASKHOST_TEST_POSTGRES names a durable server: compare ratios to
// the commit baseline, not absolute times).
func benchStores() []struct {
	name string
	open func(b *testing.B) *Store
} {
	sqlite := func(sync string) func(b *testing.B) *Store {
		return func(b *testing.B) *Store {
			s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}
	}
	return []struct {
		name string
		open func(b *testing.B) *Store
	}{
		{"FULL", sqlite("FULL")},
		{"NORMAL", sqlite("NORMAL")},
		{"postgres", func(b *testing.B) *Store {
			s, err := OpenPostgres(context.Background(), testpg.DSN(b), Options{}, PoolOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
	}
}

// BenchmarkClaimFinish measures one durable step as the runner performs it:
// claim an attempt (charging the step budget) and record its outcome with a
// 1 KiB checkpoint — two transactions, each with one event.
func BenchmarkClaimFinish(b *testing.B) {
	for _, st := range benchStores() {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			s := st.open(b)
			budgets := defaultBudgets()
			budgets.Steps.Limit = int64(b.N) + 1
			if _, err := s.CreateTask(ctx, NewTask{ID: "bench", PrincipalID: "p", Executor: "legacy",
				Spec: []byte(`{"goal":"bench"}`), Limits: budgets}); err != nil {
				b.Fatal(err)
			}
			task, err := s.StartRun(ctx, "p", "bench", StatusPending)
			if err != nil {
				b.Fatal(err)
			}
			checkpoint := make([]byte, 1024)
			started := []byte(`{"attempt":1,"steps":"1/20"}`)
			completed := []byte(`{"attempt":1,"outcome":"continue","steps":"1/20"}`)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				a, _, err := s.ClaimAttempt(ctx, "p", "bench", task.RunID, NewEvent{Type: "step.started", Payload: started})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.FinishAttempt(ctx, FinishAttempt{
					PrincipalID: "p", TaskID: "bench", RunID: task.RunID, Number: a.Number,
					Status: AttemptCompleted, Outcome: "continue", Summary: "did a step",
					Checkpoint: checkpoint, WallMillisUsed: int64(i),
					Events: []NewEvent{{Type: "step.completed", Payload: completed}},
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCommitBaseline is the floor the step is measured against: one
// transaction updating one row, on a store opened the same way, so results
// from different machines (or loads) can be compared by ratio.
func BenchmarkCommitBaseline(b *testing.B) {
	for _, st := range benchStores() {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			s := st.open(b)
			createTask(b, s, "p", "bench")
			task, err := s.StartRun(ctx, "p", "bench", StatusPending)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if err := s.Heartbeat(ctx, "p", "bench", task.RunID, int64(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFinishAndClaim measures one durable step as the runner records
// it: the outcome of an attempt (1 KiB checkpoint, step.completed) and the
// claim of the next (step.started) in one transaction. It reports the write
// statements per step besides the time. The task stays under its events
// limit throughout (the common case); BenchmarkFinishAndClaimAtLimit is a
// task whose log is full.
func BenchmarkFinishAndClaim(b *testing.B) {
	benchFinishAndClaim(b, func(n int) int { return 2*n + 16 })
}

// BenchmarkFinishAndClaimAtLimit is BenchmarkFinishAndClaim on a store
// with the default events limit, which a run of more than 250 steps
// passes: its steps pay for trimming the log as well.
func BenchmarkFinishAndClaimAtLimit(b *testing.B) {
	benchFinishAndClaim(b, func(int) int { return 0 })
}

// benchFinishAndClaim runs b.N steps of one task on a store whose
// EventsPerTask is eventsPerTask(b.N).
func benchFinishAndClaim(b *testing.B, eventsPerTask func(n int) int) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run(sync, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"),
				Options{Synchronous: sync, Limits: Limits{EventsPerTask: eventsPerTask(b.N)}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			budgets := defaultBudgets()
			budgets.Steps.Limit = int64(b.N) + 2
			if _, err := s.CreateTask(ctx, NewTask{ID: "bench", PrincipalID: "p", Executor: "legacy",
				Spec: []byte(`{"goal":"bench"}`), Limits: budgets}); err != nil {
				b.Fatal(err)
			}
			task, err := s.StartRun(ctx, "p", "bench", StatusPending)
			if err != nil {
				b.Fatal(err)
			}
			a, _, err := s.ClaimAttempt(ctx, "p", "bench", task.RunID)
			if err != nil {
				b.Fatal(err)
			}
			checkpoint := make([]byte, 1024)
			started := []byte(`{"attempt":2,"steps":"2/20"}`)
			completed := []byte(`{"attempt":1,"outcome":"continue","steps":"1/20"}`)
			b.ReportAllocs()
			before := s.statements.Load()
			b.ResetTimer()
			for i := range b.N {
				_, next, _, err := s.FinishAndClaim(ctx, FinishAttempt{
					PrincipalID: "p", TaskID: "bench", RunID: task.RunID, Number: a.Number,
					Status: AttemptCompleted, Outcome: "continue", Summary: "did a step",
					Checkpoint: checkpoint, WallMillisUsed: int64(i),
					Events: []NewEvent{{Type: "step.completed", Payload: completed}},
				}, NewEvent{Type: "step.started", Payload: started})
				if err != nil || next == nil {
					b.Fatalf("step %d: next %v, %v", i, next, err)
				}
				a = *next
			}
			b.StopTimer()
			b.ReportMetric(float64(s.statements.Load()-before)/float64(b.N), "stmts/step")
		})
	}
}

// BenchmarkAppendEventsAtLimit appends one event to a task whose log
// already holds EventsPerTask events (the default 500, and 10000), so every
// append trims the oldest one: the cost of keeping a full log at its bound.
// It reports the write statements per append.
func BenchmarkAppendEventsAtLimit(b *testing.B) {
	for _, st := range benchStores() {
		for _, limit := range []int{500, 10000} {
			b.Run(fmt.Sprintf("%s/%d", st.name, limit), func(b *testing.B) {
				ctx := context.Background()
				s := st.open(b)
				s.lim.EventsPerTask = limit
				task := runningTask(b, s, "p", "bench")
				for n := len(allEvents(b, s, "p", "bench")); n < limit; n += 1000 {
					if _, err := s.AppendEvents(ctx, "p", "bench", task.RunID, slices.Repeat([]NewEvent{{Type: "fill"}}, 1000)...); err != nil {
						b.Fatal(err)
					}
				}
				ev := NewEvent{Type: "tool.called", Payload: []byte(`{"tool":"search"}`)}
				before := s.statements.Load()
				b.ResetTimer()
				for range b.N {
					if _, err := s.AppendEvents(ctx, "p", "bench", task.RunID, ev); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(s.statements.Load()-before)/float64(b.N), "stmts/op")
				if n := len(allEvents(b, s, "p", "bench")); n != limit {
					b.Fatalf("%d events kept, want %d", n, limit)
				}
			})
		}
	}
}

// BenchmarkFinishAndClaimConcurrent measures durable steps at
// synchronous=FULL when K tasks step at once, each in its own goroutine,
// with group commit (the default) and without it (every step its own
// commit), in the same run. One op is one step of any task; steps/s is
// the store's total.
func BenchmarkFinishAndClaimConcurrent(b *testing.B) {
	for _, k := range []int{1, 4, 16} {
		for _, mode := range []string{"group", "alone"} {
			b.Run(fmt.Sprintf("K=%d/%s", k, mode), func(b *testing.B) {
				ctx := context.Background()
				s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: "FULL"})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if mode == "alone" {
					s.group = nil
				}
				steps := make([]FinishAttempt, k)
				for i := range steps {
					id := fmt.Sprint("bench", i)
					budgets := defaultBudgets()
					budgets.Steps.Limit = int64(b.N) + 2
					if _, err := s.CreateTask(ctx, NewTask{ID: id, PrincipalID: "p", Executor: "legacy",
						Spec: []byte(`{"goal":"bench"}`), Limits: budgets}); err != nil {
						b.Fatal(err)
					}
					task, err := s.StartRun(ctx, "p", id, StatusPending)
					if err != nil {
						b.Fatal(err)
					}
					a, _, err := s.ClaimAttempt(ctx, "p", id, task.RunID)
					if err != nil {
						b.Fatal(err)
					}
					steps[i] = FinishAttempt{
						PrincipalID: "p", TaskID: id, RunID: task.RunID, Number: a.Number,
						Status: AttemptCompleted, Outcome: "continue", Summary: "did a step",
						Checkpoint: make([]byte, 1024),
						Events:     []NewEvent{{Type: "step.completed", Payload: []byte(`{"attempt":1,"outcome":"continue","steps":"1/20"}`)}},
					}
				}
				started := []byte(`{"attempt":2,"steps":"2/20"}`)
				var left atomic.Int64
				left.Store(int64(b.N))
				var wg sync.WaitGroup
				errs := make(chan error, k)
				b.ResetTimer()
				start := time.Now()
				for _, f := range steps {
					wg.Go(func() {
						for left.Add(-1) >= 0 {
							_, next, _, err := s.FinishAndClaim(ctx, f, NewEvent{Type: "step.started", Payload: started})
							if err != nil || next == nil {
								errs <- fmt.Errorf("%s: next %v, %w", f.TaskID, next, err)
								return
							}
							f.Number = next.Number
							f.WallMillisUsed++
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "steps/s")
			})
		}
	}
}
