package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverSchema holds River's tables: taskhost's store refuses a schema
// that holds another application's tables.
const riverSchema = "taskhost_bench_river"

// stepsArgs is a job of N resumable steps.
type stepsArgs struct {
	N int `json:"n"`
}

func (stepsArgs) Kind() string { return "taskhost_bench_steps" }

// stepsWorker runs a job's N steps, each a ResumableStep that records
// itself with ResumableSetStepTx in a transaction of its own and commits
// before the callback returns, as River's docs ask, and sends the time
// of each step's callback on times.
type stepsWorker struct {
	river.WorkerDefaults[stepsArgs]
	pool  *pgxpool.Pool
	times chan []time.Duration
}

func (w *stepsWorker) Work(ctx context.Context, job *river.Job[stepsArgs]) error {
	times := make([]time.Duration, 0, job.Args.N)
	for i := range job.Args.N {
		river.ResumableStep(ctx, fmt.Sprintf("step-%d", i), nil, func(ctx context.Context) error {
			start := time.Now()
			tx, err := w.pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx) //nolint:errcheck // a no-op after the commit
			if job, err = river.ResumableSetStepTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
				return err
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			times = append(times, time.Since(start))
			return nil
		})
	}
	w.times <- times
	return nil
}

// riverSteps is a started River client with one queue of one worker.
type riverSteps struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	worker *stepsWorker
	done   <-chan *river.Event
	stop   func()
}

func openRiver(ctx context.Context, dsn string) (stepper, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	r, err := startRiver(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return r, nil
}

func startRiver(ctx context.Context, pool *pgxpool.Pool) (*riverSteps, error) {
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+riverSchema); err != nil {
		return nil, fmt.Errorf("schema %s: %w", riverSchema, err)
	}
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: riverSchema})
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrations: %w", err)
	}
	w := &stepsWorker{pool: pool, times: make(chan []time.Duration, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(driver, &river.Config{
		Logger:  slog.New(slog.DiscardHandler),
		Schema:  riverSchema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers: workers,
		// The job is inserted by this client, which is notified of it:
		// its fetch is not what is timed, only the steps inside it.
		FetchCooldown: time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	done, stop := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	if err := client.Start(ctx); err != nil {
		stop()
		return nil, err
	}
	return &riverSteps{pool: pool, client: client, worker: w, done: done, stop: stop}, nil
}

// steps inserts a job of n steps and waits until River has completed it,
// so that its completion's writes never overlap the next row's steps.
func (r *riverSteps) steps(ctx context.Context, n int) ([]time.Duration, error) {
	res, err := r.client.Insert(ctx, stepsArgs{N: n}, nil)
	if err != nil {
		return nil, err
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var times []time.Duration
	select {
	case times = <-r.worker.times:
	case <-wait.Done():
		return nil, fmt.Errorf("job %d: no steps within 10 minutes", res.Job.ID)
	}
	for {
		select {
		case ev := <-r.done:
			if ev.Job.ID != res.Job.ID {
				continue
			}
			if ev.Kind != river.EventKindJobCompleted {
				return nil, fmt.Errorf("job %d ended %s: %v", ev.Job.ID, ev.Kind, ev.Job.Errors)
			}
			return times, checkRecorded(ev.Job.Metadata, n)
		case <-wait.Done():
			return nil, fmt.Errorf("job %d: not completed within 10 minutes", res.Job.ID)
		}
	}
}

// checkRecorded fails unless the job's metadata names its last step as
// the one it recorded: the timed steps did write their checkpoint.
func checkRecorded(metadata []byte, n int) error {
	var md map[string]any
	if err := json.Unmarshal(metadata, &md); err != nil {
		return fmt.Errorf("job metadata: %w", err)
	}
	want := fmt.Sprintf("step-%d", n-1)
	if got := md["river:resumable_step"]; got != want {
		return errors.New("river recorded resumable step " + fmt.Sprint(got) + ", want " + want)
	}
	return nil
}

func (r *riverSteps) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.client.Stop(ctx) //nolint:errcheck // the run is over
	r.stop()
	r.pool.Close()
}
