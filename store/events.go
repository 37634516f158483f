package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// appendEvents inserts events for a task inside tx — the transaction of the
// change they describe, so an event is never stored for a change that did not
// commit, nor a change without its events — counts them in the task's
// events_stored, and trims the task's events to the newest
// Limits.EventsPerTask when that count passes it. Callers have run
// checkEvents already.
func (s *Store) appendEvents(ctx context.Context, tx *txn, taskID string, runID int64, events []NewEvent) ([]Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	// The count goes first: on PostgreSQL its UPDATE takes the task row's
	// lock before the events are numbered (see pgDialect.lockTask).
	var stored int64
	if err := tx.QueryRowContext(ctx, qCountEvents, len(events), taskID).Scan(&stored); err != nil {
		return nil, fmt.Errorf("count the events of task %s: %w", taskID, err)
	}
	tx.wrote(taskID)
	return s.storeEvents(ctx, tx, taskID, runID, stored, events)
}

// storeEvents is appendEvents after the count: events are already counted
// in stored, the task's new count, by the statement that changed the task
// row in tx — which on PostgreSQL also holds the row's lock, so that the
// events are numbered under it. A path that changes the task row anyway
// counts its events there, sparing appendEvents' own statement.
func (s *Store) storeEvents(ctx context.Context, tx *txn, taskID string, runID, stored int64, events []NewEvent) ([]Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	now := s.now()
	out := make([]Event, 0, len(events))
	for _, e := range events {
		payload := bytes.Clone(e.Payload) // the returned Event must not alias the caller's buffer
		if len(payload) == 0 {
			payload = []byte("{}")
		}
		ev := Event{TaskID: taskID, RunID: runID, Type: e.Type, Time: fromNanos(nanos(now)), Payload: payload}
		// seq comes from AUTOINCREMENT: strictly increasing and never
		// reused, even after retention deletes old rows, so a watcher's
		// "after seq" cursor stays valid.
		err := tx.QueryRowContext(ctx, qInsertEvent, taskID, runID, e.Type, nanos(now), payload).Scan(&ev.Seq)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, s.trimEvents(ctx, tx, taskID, stored, 0)
}

// trimEvents deletes task taskID's oldest events down to the newest
// Limits.EventsPerTask when stored, its count of events, is past that limit
// by more than slack; a task within it pays nothing. The count is lowered
// by the rows deleted, so it stays the number left.
func (s *Store) trimEvents(ctx context.Context, tx *txn, taskID string, stored, slack int64) error {
	limit := int64(s.lim.EventsPerTask)
	if stored <= limit+slack {
		return nil
	}
	res, err := tx.ExecContext(ctx, qTrimEvents, taskID, stored-limit)
	if err != nil {
		return fmt.Errorf("trim the events of task %s: %w", taskID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("trim the events of task %s: %w", taskID, err)
	}
	if _, err := tx.ExecContext(ctx, qUncountEvents, n, taskID); err != nil {
		return fmt.Errorf("trim the events of task %s: %w", taskID, err)
	}
	return nil
}

// maxEventRows is the most events one INSERT of insertEvents writes; a
// step writes two to four.
const maxEventRows = 4

// insertEvents inserts events for a task inside tx as appendEvents does,
// but in multi-row INSERTs and without reading their seqs back, counting
// or trimming: the step path, whose caller needs no seqs and counts and
// trims itself.
func (s *Store) insertEvents(ctx context.Context, tx *txn, taskID string, runID, now int64, events []NewEvent) error {
	for chunk := range slices.Chunk(events, maxEventRows) {
		args := make([]any, 0, 5*len(chunk))
		for _, e := range chunk {
			payload := e.Payload
			if len(payload) == 0 {
				payload = []byte("{}")
			}
			args = append(args, taskID, runID, e.Type, now, payload)
		}
		if _, err := tx.ExecContext(ctx, insertEventsSQL(len(chunk)), args...); err != nil {
			return err
		}
	}
	return nil
}

// insertEventsSQL inserts n events; seq comes from AUTOINCREMENT in the
// order of the rows.
func insertEventsSQL(n int) string {
	rows := make([]string, n)
	for i := range rows {
		rows[i] = `(` + numbered(5*i+1, 5) + `)`
	}
	return `INSERT INTO events (task_id, run_id, type, time_ns, payload) VALUES ` + strings.Join(rows, ", ")
}

const (
	qInsertEvent = `INSERT INTO events (task_id, run_id, type, time_ns, payload) VALUES ($1, $2, $3, $4, $5) RETURNING seq`
	// qCountEvents adds $1 events to the task's count and returns the new
	// count; qUncountEvents takes $1 away.
	qCountEvents   = `UPDATE tasks SET events_stored = events_stored + $1 WHERE id = $2 RETURNING events_stored`
	qUncountEvents = `UPDATE tasks SET events_stored = events_stored - $1 WHERE id = $2`
	// qCountRunEvents is qCountEvents for principal $3's task in run $4 only.
	qCountRunEvents = `UPDATE tasks SET events_stored = events_stored + $1
		WHERE id = $2 AND principal_id = $3 AND run_id = $4 RETURNING events_stored`
	// Delete the task's oldest $2 events: an index walk of exactly those
	// entries, however many the task holds.
	qTrimEvents = `DELETE FROM events WHERE seq IN (
		SELECT seq FROM events WHERE task_id = $1 ORDER BY seq LIMIT $2)`
	qEvents = `SELECT seq, task_id, run_id, type, time_ns, payload FROM events
		WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`
	qTaskExists = `SELECT 1 FROM tasks WHERE id = $1 AND principal_id = $2`
)

// AppendEvents appends events to a task's current run. runID must be the
// task's run: events of a run that has been superseded are refused with a
// *TransitionError, so a late writer cannot attribute events to a newer run.
func (s *Store) AppendEvents(ctx context.Context, principal, id string, runID int64, events ...NewEvent) ([]Event, error) {
	if err := s.checkEvents(events); err != nil {
		return nil, err
	}
	var out []Event
	err := s.write(ctx, func(tx *txn) error {
		out = nil
		// The check of the run and the count of the events are one
		// statement; a miss is explained after.
		var stored int64
		err := tx.QueryRowContext(ctx, qCountRunEvents, len(events), id, principal, runID).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			st, run, err := taskState(ctx, tx, principal, id)
			if err != nil {
				return err
			}
			return &TransitionError{TaskID: id, Current: st, RunID: run, WantRunID: runID}
		}
		if err != nil || len(events) == 0 {
			return err
		}
		tx.wrote(id)
		out, err = s.storeEvents(ctx, tx, id, runID, stored, events)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Events returns up to limit (default 100, at most 1000) of a task's events
// with seq > afterSeq, oldest first. A watcher polls with the last seq seen.
func (s *Store) Events(ctx context.Context, principal, id string, afterSeq int64, limit int) ([]Event, error) {
	limit = pageSize(limit)
	if err := s.taskExists(ctx, principal, id); err != nil {
		return nil, err
	}
	rows, err := s.readRows(ctx, qEvents, id, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var ns int64
		if err := rows.Scan(&e.Seq, &e.TaskID, &e.RunID, &e.Type, &ns, &e.Payload); err != nil {
			return nil, err
		}
		e.Time = fromNanos(ns)
		out = append(out, e)
	}
	return out, rows.Err()
}

// taskExists returns ErrNotFound unless principal owns task id.
func (s *Store) taskExists(ctx context.Context, principal, id string) error {
	var one int
	err := s.readRow(ctx, qTaskExists, id, principal).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound(id)
	}
	return err
}

// pageSize applies the default (100) and cap (1000) of a listing's limit.
func pageSize(limit int) int {
	switch {
	case limit <= 0:
		return 100
	case limit > 1000:
		return 1000
	}
	return limit
}
