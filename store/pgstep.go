package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgStep is FinishAndClaim's common case (finishAndClaimFast's) on
// PostgreSQL in one round trip: a pgx batch of two statements that the
// server runs as one implicit transaction — the task row's lock, then one
// statement whose CTEs do every concern of the step (the task's outcome
// and next charge, the attempt's close, the effects' settling, the next
// attempt, the events and their trim). The lock comes first, in a
// statement of its own, so that the second, READ COMMITTED, takes its
// snapshot holding it: every writer of the task's attempts, effects and
// events holds that lock, so what the CTEs read is what they change, and
// the events are numbered under it. A batch is all or nothing: an error in
// either statement rolls back both.
//
// ok is false, with nothing written, when the task is not in the common
// case (not running in f.RunID, no steps left, the attempt not running);
// the caller then takes the general path, which explains any refusal.
func (s *Store) pgStep(ctx context.Context, f FinishAttempt, events []NewEvent) (t Task, next *Attempt, ok bool, err error) {
	now := nanos(s.now())
	var checkpoint []byte // nil binds NULL: coalesce keeps the stored value
	newCheckpoint := 0
	if len(f.Checkpoint) > 0 {
		checkpoint, newCheckpoint = f.Checkpoint, 1
	}
	types := make([]string, len(events))
	payloads := make([][]byte, len(events))
	for i, e := range events {
		types[i], payloads[i] = e.Type, e.Payload
		if len(payloads[i]) == 0 {
			payloads[i] = []byte("{}")
		}
	}
	args := s.d.bind([]any{f.TaskID, f.PrincipalID, f.RunID, f.Number, now, f.WallMillisUsed, checkpoint, newCheckpoint,
		len(events), s.lim.EventsPerTask, eventTrimSlack,
		string(f.Status), f.Outcome, f.Summary, string(f.Reason), f.Message, f.ExitCode, f.ExitSignal, f.StderrTail,
		types, payloads})
	for try := range maxWriteTries {
		start := time.Now()
		t, ok, err = s.pgStepOnce(ctx, f.TaskID, args)
		if err == nil {
			s.statements.Add(2)
			if ok {
				s.observeCommit(time.Since(start))
				return t, &Attempt{TaskID: f.TaskID, Number: f.Number + 1, RunID: f.RunID, Status: AttemptRunning,
					StartedAt: fromNanos(now), ExitCode: -1}, true, nil
			}
			return Task{}, nil, false, nil
		}
		// Retried: a transaction that lost a race, and a batch that never
		// reached the server or lost its connection before the lock
		// statement answered (nothing of it could have committed). One
		// lost later has an unknown outcome: it is reported
		// (unavailable), never run again.
		var lost *lostConnError
		switch {
		case errors.As(err, &lost) && ctx.Err() == nil:
			s.observeRetry(retryCode(lost.err))
		case s.d.retryable(err) || pgconn.SafeToRetry(err):
			s.observeRetry(retryCode(err))
		default:
			return Task{}, nil, false, s.dbErr(err)
		}
		if werr := backoff(ctx, try); werr != nil {
			return Task{}, nil, false, s.dbErr(err)
		}
	}
	if lost := (*lostConnError)(nil); errors.As(err, &lost) {
		return Task{}, nil, false, s.dbErr(lost.err) // the server is gone: unavailable, not busy
	}
	return Task{}, nil, false, &UnavailableError{Class: "busy", Err: fmt.Errorf("store %s: a step lost to concurrent writes %d times: %w", s.path, maxWriteTries, err)}
}

func (s *Store) pgStepOnce(ctx context.Context, id string, args []any) (t Task, ok bool, err error) {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return Task{}, false, s.beforeCommit(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		c := dc.(*stdlib.Conn).Conn()
		b := &pgx.Batch{}
		b.Queue(qPGStepLock, id)
		b.Queue(qPGStep, args...)
		br := c.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			// The lock statement did not answer: the batch's transaction
			// cannot have committed.
			return s.beforeCommit(err)
		}
		t, err = scanTask(br.QueryRow())
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = nil
		case err == nil:
			ok = true
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		return Task{}, false, err
	}
	return t, ok, nil
}

const (
	qPGStepLock = `SELECT 1 FROM tasks WHERE id = $1 FOR NO KEY UPDATE`
	// qPGStep: $1 task, $2 principal, $3 run, $4 attempt number, $5 now,
	// $6 wall time, $7 checkpoint or NULL, $8 1 when a new checkpoint,
	// $9 events, $10 events limit, $11 trim slack, $12..$19 the attempt's
	// close, $20 and $21 the events' types and payloads. Every CTE but the
	// first acts only when the task's compare-and-set matched (EXISTS upd);
	// the trim reads the task's count of events before this statement
	// (CTEs see the statement's snapshot, not each other's changes) and
	// deletes from the events before this statement's, which suffices while
	// $9 <= $10 (FinishAndClaim's condition for this path). The effects'
	// two changes are one UPDATE: one statement cannot change a row twice.
	qPGStep = `WITH upd AS (
		UPDATE tasks SET wall_ms_used = greatest(wall_ms_used, $6::bigint),
			checkpoint = coalesce($7::bytea, checkpoint),
			checkpoint_attempt = CASE WHEN $8::int = 1 THEN $4::bigint ELSE checkpoint_attempt END,
			steps_used = steps_used + 1, updated_ns = $5::bigint,
			events_stored = CASE WHEN events_stored + $9::bigint > $10::bigint + $11::bigint THEN $10::bigint ELSE events_stored + $9::bigint END
		WHERE id = $1 AND principal_id = $2 AND run_id = $3 AND status = 'running' AND steps_used < steps_limit
			AND EXISTS (SELECT 1 FROM attempts WHERE task_id = $1 AND number = $4::bigint AND run_id = $3 AND status = 'running')
		RETURNING ` + taskCols + `
	), fin AS (
		UPDATE attempts SET status = $12, outcome = $13, summary = $14, reason = $15, message = $16, ended_ns = $5::bigint,
			exit_code = $17::bigint, exit_signal = $18, stderr_tail = $19
		WHERE task_id = $1 AND number = $4::bigint AND status = 'running' AND EXISTS (SELECT 1 FROM upd)
	), eff AS (
		UPDATE effects SET result = NULL,
			resolution = CASE WHEN attempt = $4::bigint AND status = 'observed' AND resolution = 'unsettled' THEN '' ELSE resolution END
		WHERE task_id = $1 AND (result IS NOT NULL OR (attempt = $4::bigint AND status = 'observed' AND resolution = 'unsettled'))
			AND EXISTS (SELECT 1 FROM upd)
	), claim AS (
		INSERT INTO attempts (task_id, number, run_id, status, started_ns) SELECT $1, $4::bigint + 1, $3, 'running', $5::bigint FROM upd
	), ev AS (
		INSERT INTO events (task_id, run_id, type, time_ns, payload)
		SELECT $1, $3, e.type, $5::bigint, e.payload FROM upd, unnest($20::text[], $21::bytea[]) WITH ORDINALITY AS e(type, payload, n)
		ORDER BY e.n
	), trim AS (
		DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE task_id = $1 ORDER BY seq
			LIMIT coalesce((SELECT CASE WHEN t.events_stored + $9::bigint > $10::bigint + $11::bigint THEN t.events_stored + $9::bigint - $10::bigint ELSE 0 END
				FROM tasks t WHERE t.id = $1), 0))
			AND EXISTS (SELECT 1 FROM upd)
	)
	SELECT ` + taskCols + ` FROM upd`
)
