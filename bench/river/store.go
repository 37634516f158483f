package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/store"
)

// benchPrincipal owns the tasks of this bench in taskhost's tables.
const benchPrincipal = "river-bench"

// checkpoint is what each taskhost step of this bench records, as
// store's BenchmarkPostgresStep does: 1 KiB.
var checkpoint = make([]byte, 1024)

// stepStarted is the event of the next attempt's start.
var stepStarted = store.NewEvent{Type: "step.started", Payload: []byte(`{"attempt":2,"steps":"2/20"}`)}

// runningTask creates a task on s, starts its run and claims its first
// attempt, and returns the finish of that attempt as a taskhost step
// records it: a 1 KiB checkpoint and a step.completed event.
func runningTask(ctx context.Context, s *store.Store, id string) (store.FinishAttempt, error) {
	lim := store.Budgets{Steps: store.Budget{Limit: 1 << 40}, WallMillis: store.Budget{Limit: 1 << 40}}
	if _, err := s.CreateTask(ctx, store.NewTask{ID: id, PrincipalID: benchPrincipal, Executor: "testexec",
		Spec: []byte(`{"goal":"bench"}`), Limits: lim}); err != nil {
		return store.FinishAttempt{}, err
	}
	t, err := s.StartRun(ctx, benchPrincipal, id, store.StatusPending)
	if err != nil {
		return store.FinishAttempt{}, err
	}
	a, _, err := s.ClaimAttempt(ctx, benchPrincipal, id, t.RunID)
	if err != nil {
		return store.FinishAttempt{}, err
	}
	return store.FinishAttempt{
		PrincipalID: benchPrincipal, TaskID: id, RunID: t.RunID, Number: a.Number,
		Status: store.AttemptCompleted, Outcome: "continue", Summary: "did a step", Checkpoint: checkpoint,
		Events: []store.NewEvent{{Type: "step.completed", Payload: []byte(`{"attempt":1,"outcome":"continue","steps":"1/20"}`)}},
	}, nil
}

// taskID names a task of this run: a database for benchmarks keeps the
// tasks of earlier runs.
func taskID(kind string) string {
	return fmt.Sprintf("t_riverbench_%s_%d", kind, time.Now().UnixNano())
}

// storeSteps is one task of taskhost's PostgreSQL store stepping.
type storeSteps struct {
	s *store.Store
	f store.FinishAttempt
}

func openStore(ctx context.Context, dsn string) (stepper, error) {
	s, f, err := openTask(ctx, dsn, "store")
	if err != nil {
		return nil, err
	}
	return &storeSteps{s: s, f: f}, nil
}

// openTask opens taskhost's store on dsn and starts a task of kind there.
func openTask(ctx context.Context, dsn, kind string) (*store.Store, store.FinishAttempt, error) {
	s, err := store.OpenPostgres(ctx, dsn, store.Options{}, store.PoolOptions{})
	if err != nil {
		return nil, store.FinishAttempt{}, err
	}
	f, err := runningTask(ctx, s, taskID(kind))
	if err != nil {
		s.Close()
		return nil, store.FinishAttempt{}, err
	}
	return s, f, nil
}

// steps times n FinishAndClaim calls: each closes the running attempt
// with its checkpoint and event and claims the next, one commit.
func (st *storeSteps) steps(ctx context.Context, n int) ([]time.Duration, error) {
	times := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		_, next, _, err := st.s.FinishAndClaim(ctx, st.f, stepStarted)
		if err != nil {
			return nil, err
		}
		if next == nil {
			return nil, errors.New("FinishAndClaim claimed no next attempt")
		}
		times = append(times, time.Since(start))
		st.f.Number, st.f.WallMillisUsed = next.Number, st.f.WallMillisUsed+1
	}
	return times, nil
}

func (st *storeSteps) close() { st.s.Close() }
