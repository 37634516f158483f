package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhost/taskhost/store"
)

// rawSteps writes the rows of a taskhost step to a task of its own with
// pgx and nothing in between: the floor of a step of those rows.
type rawSteps struct {
	s    *store.Store // made the task; closed with the bench
	conn *pgx.Conn
	f    store.FinishAttempt
}

func openRaw(ctx context.Context, dsn string) (stepper, error) {
	s, f, err := openTask(ctx, dsn, "raw")
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &rawSteps{s: s, conn: conn, f: f}, nil
}

// steps times n commits of one batch each: the task's update (budgets,
// checkpoint, counters), the running attempt's close, the next attempt's
// insert and the two events, between BEGIN and COMMIT.
func (r *rawSteps) steps(ctx context.Context, n int) ([]time.Duration, error) {
	times := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		num, now := r.f.Number, time.Now().UnixNano()
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(`UPDATE tasks SET wall_ms_used = greatest(wall_ms_used, $2), checkpoint = $3, checkpoint_attempt = $4,
			steps_used = steps_used + 1, updated_ns = $5, events_stored = events_stored + 2 WHERE id = $1`,
			r.f.TaskID, num, r.f.Checkpoint, num, now)
		b.Queue(`UPDATE attempts SET status = 'completed', outcome = 'continue', summary = $3, ended_ns = $4
			WHERE task_id = $1 AND number = $2`, r.f.TaskID, num, r.f.Summary, now)
		b.Queue(`INSERT INTO attempts (task_id, number, run_id, status, started_ns) VALUES ($1, $2, $3, 'running', $4)`,
			r.f.TaskID, num+1, r.f.RunID, now)
		b.Queue(`INSERT INTO events (task_id, run_id, type, time_ns, payload) VALUES ($1, $2, 'step.completed', $3, $4), ($1, $2, 'step.started', $3, $5)`,
			r.f.TaskID, r.f.RunID, now, r.f.Events[0].Payload, stepStarted.Payload)
		b.Queue(`COMMIT`)
		if err := r.conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("raw step %d: %w", num, err)
		}
		times = append(times, time.Since(start))
		r.f.Number++
	}
	return times, nil
}

func (r *rawSteps) close() {
	r.conn.Close(context.Background()) //nolint:errcheck // the run is over
	r.s.Close()
}
