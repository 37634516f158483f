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

	"github.com/jackc/pgx/v5"

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
			task, a := benchClaimed(b, s, int64(b.N)+2)
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

// benchClaimed creates task "bench" of p with a step budget of steps,
// starts its run and claims its first attempt.
func benchClaimed(b *testing.B, s *Store, steps int64) (Task, Attempt) {
	b.Helper()
	ctx := context.Background()
	budgets := defaultBudgets()
	budgets.Steps.Limit = steps
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
	return task, a
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
				s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: "FULL"})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if mode == "alone" {
					s.group = nil
				}
				tasks := stepTasks(b, s, k)
				b.ResetTimer()
				perSec := stepRound(b, s, tasks, k, b.N)
				b.StopTimer()
				b.ReportMetric(perSec, "steps/s")
				if commits, flushes, _ := s.sync.stats(); flushes > 0 {
					b.ReportMetric(float64(commits)/float64(flushes), "commits/fsync")
				}
			})
		}
	}
}

// stepTasks creates k running tasks on s, each with a claimed attempt, and
// returns the outcome of each as the runner would record it.
func stepTasks(b *testing.B, s *Store, k int) []FinishAttempt {
	ctx := context.Background()
	tasks := make([]FinishAttempt, k)
	for i := range tasks {
		id := fmt.Sprint("bench", i)
		budgets := defaultBudgets()
		budgets.Steps.Limit = 1 << 40
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
		tasks[i] = FinishAttempt{
			PrincipalID: "p", TaskID: id, RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", Summary: "did a step",
			Checkpoint: make([]byte, 1024),
			Events:     []NewEvent{{Type: "step.completed", Payload: []byte(`{"attempt":1,"outcome":"continue","steps":"1/20"}`)}},
		}
	}
	return tasks
}

var benchStarted = NewEvent{Type: "step.started", Payload: []byte(`{"attempt":2,"steps":"2/20"}`)}

// stepRound has the first k of tasks step at once, steps in all, and
// returns the steps per second.
func stepRound(b *testing.B, s *Store, tasks []FinishAttempt, k, steps int) float64 {
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(steps))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range k {
		wg.Go(func() {
			f := &tasks[i]
			for left.Add(-1) >= 0 {
				_, next, _, err := s.FinishAndClaim(ctx, *f, benchStarted)
				if err != nil || next == nil {
					b.Errorf("%s: next %v, %v", f.TaskID, next, err)
					return
				}
				f.Number = next.Number
				f.WallMillisUsed++
			}
		})
	}
	wg.Wait()
	return float64(steps) / time.Since(start).Seconds()
}

func medianOf(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// BenchmarkFinishAndClaimScaling measures, at synchronous=FULL with group
// commit, the steps/s of 1, 4 and 16 tasks stepping at once in rounds that
// measure each count in turn (so that a change of the machine's load falls
// on all alike), and reports the median over rounds of 4's and 16's
// steps/s over one task's in the same round (targets: ≥ 3× and ≥ 4×).
// One op is one round.
func BenchmarkFinishAndClaimScaling(b *testing.B) {
	const steps = 200 // per round and count, in all
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: "FULL"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tasks := stepTasks(b, s, 16)
	var x4, x16, one []float64
	b.ResetTimer()
	for range b.N {
		r1 := stepRound(b, s, tasks, 1, steps)
		one = append(one, r1)
		x4 = append(x4, stepRound(b, s, tasks, 4, steps)/r1)
		x16 = append(x16, stepRound(b, s, tasks, 16, steps)/r1)
	}
	b.StopTimer()
	b.ReportMetric(medianOf(one), "steps/s(1)")
	b.ReportMetric(medianOf(x4), "x4/x1")
	b.ReportMetric(medianOf(x16), "x16/x1")
}

// BenchmarkPostgresStep measures, on testpg's cluster (durable only when
// TASKHOST_TEST_POSTGRES names a server with fsync on), in rounds that
// measure each in turn: one task's durable step (FinishAndClaim: pgStep),
// a raw pgx commit of the same rows in one batch (the floor: the task
// update, the attempt's close and the next one's insert, two events), and
// 4 tasks stepping at once. It reports the medians over rounds of
// step/raw (target ≤ 2) and of 4 tasks' steps/s over one's (≥ 2.5). One
// op is one round.
func BenchmarkPostgresStep(b *testing.B) {
	const steps = 200
	ctx := context.Background()
	dsn := testpg.DSN(b)
	s, err := OpenPostgres(ctx, dsn, Options{}, PoolOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tasks := stepTasks(b, s, 5)
	// The raw commit writes the same rows to a task of its own, with pgx
	// and no store in between.
	raw, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close(ctx)
	rawTask := tasks[4]
	rawRun := func() float64 {
		start := time.Now()
		for range steps {
			n := rawTask.Number
			batch := &pgx.Batch{}
			batch.Queue(`BEGIN`)
			batch.Queue(`UPDATE tasks SET wall_ms_used = greatest(wall_ms_used, $2), checkpoint = $3, checkpoint_attempt = $4,
				steps_used = steps_used + 1, updated_ns = $5, events_stored = events_stored + 2 WHERE id = $1`,
				rawTask.TaskID, int64(n), rawTask.Checkpoint, n, time.Now().UnixNano())
			batch.Queue(`UPDATE attempts SET status = 'completed', outcome = 'continue', summary = 'did a step', ended_ns = $3
				WHERE task_id = $1 AND number = $2`, rawTask.TaskID, n, time.Now().UnixNano())
			batch.Queue(`INSERT INTO attempts (task_id, number, run_id, status, started_ns) VALUES ($1, $2, $3, 'running', $4)`,
				rawTask.TaskID, n+1, rawTask.RunID, time.Now().UnixNano())
			batch.Queue(`INSERT INTO events (task_id, run_id, type, time_ns, payload) VALUES ($1, $2, 'step.completed', $3, $4), ($1, $2, 'step.started', $3, $5)`,
				rawTask.TaskID, rawTask.RunID, time.Now().UnixNano(), rawTask.Events[0].Payload, benchStarted.Payload)
			batch.Queue(`COMMIT`)
			if err := raw.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
			rawTask.Number++
		}
		return steps / time.Since(start).Seconds()
	}
	var overRaw, x4, one []float64
	b.ResetTimer()
	for range b.N {
		r := rawRun()
		r1 := stepRound(b, s, tasks, 1, steps)
		one = append(one, r1)
		overRaw = append(overRaw, r/r1)
		x4 = append(x4, stepRound(b, s, tasks, 4, steps)/r1)
	}
	b.StopTimer()
	b.ReportMetric(medianOf(one), "steps/s(1)")
	b.ReportMetric(medianOf(overRaw), "step/raw")
	b.ReportMetric(medianOf(x4), "x4/x1")
}
