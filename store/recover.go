package store

import (
	"context"
)

// Recovery reports what Recover changed.
type Recovery struct {
	Interrupted    []string // ids of the tasks moved to interrupted, in creation order
	AttemptsClosed int      // running attempts closed as interrupted
}

// Recover runs at host start-up, before anything else touches the store:
// whatever this host (Options.HostID) left live when it died is interrupted
// (host_restart) across all principals; tasks leased to other hosts of a
// fleet are theirs, and SweepLostHosts takes those of a dead one. That is
// every running or waiting_approval task leased to this host (or to no
// host), and every running attempt of those tasks (its step's outcome is
// unknown, so it is never completed).
// events(t) gives the events to append for each interrupted task, seen after
// the change. Everything is one transaction. Nothing resumes automatically.
//
// chargeWallMillis is added to each interrupted task's active time, capped
// at its limit: the time between the last persisted heartbeat and the crash
// is unknown, so the whole heartbeat interval is charged (never undercount).
func (s *Store) Recover(ctx context.Context, chargeWallMillis int64, events func(t Task) []NewEvent) (Recovery, error) {
	if chargeWallMillis < 0 {
		return Recovery{}, invalidf("wall charge must not be negative")
	}
	ids, closed, err := s.interrupt(ctx, ReasonHostRestart, chargeWallMillis, events)
	return Recovery{Interrupted: ids, AttemptsClosed: closed}, err
}

// InterruptRunning is Recover for a graceful stop: the same changes with the
// given reason (normally host_shutdown), committed before the plugins are
// stopped, so a step that finishes during shutdown cannot commit. It returns
// the ids of the interrupted tasks.
func (s *Store) InterruptRunning(ctx context.Context, reason Reason, events func(t Task) []NewEvent) ([]string, error) {
	if err := checkReason(reason); err != nil {
		return nil, err
	}
	ids, _, err := s.interrupt(ctx, reason, 0, events)
	return ids, err
}

const (
	qLiveOfHost        = `SELECT id FROM tasks WHERE status IN ('running', 'waiting_approval') AND lease_host IN ($1, '') ORDER BY seq`
	qInterruptAttempts = `UPDATE attempts SET status = 'interrupted', reason = $1, ended_ns = $2
		WHERE status = 'running'
			AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = attempts.task_id AND t.lease_host IN ($3, ''))`
)

func (s *Store) interrupt(ctx context.Context, reason Reason, chargeWallMillis int64, events func(t Task) []NewEvent) ([]string, int, error) {
	var ids []string
	var closed int64
	err := s.write(ctx, func(tx *txn) error {
		ids, closed = nil, 0
		now := nanos(s.now())
		// On PostgreSQL the tasks are locked first in seq order, the order
		// every multi-task writer takes: two hosts recovering the unnamed
		// host's leftovers at once, or a recovery and a sweep, wait for
		// each other instead of deadlocking.
		if lock := s.d.forUpdate("tasks", false); lock != "" {
			if _, err := tx.exec(ctx, qLiveOfHost+lock, s.host); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, tx.s.q.interruptTasks, string(reason), now, chargeWallMillis, s.host)
		if err != nil {
			return err
		}
		var tasks []Task
		for rows.Next() {
			t, err := scanTask(rows)
			if err != nil {
				rows.Close()
				return err
			}
			tasks = append(tasks, t)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// RETURNING gives rows in no promised order; report creation order.
		sortBySeq(tasks)
		for _, t := range tasks {
			ids = append(ids, t.ID)
			if events == nil {
				continue
			}
			evs := events(t)
			if err := s.checkEvents(evs); err != nil {
				return err
			}
			if _, err := s.appendEvents(ctx, tx, t.ID, t.RunID, evs); err != nil {
				return err
			}
		}
		// Pending approvals die with their host; an effect that was
		// crossing its boundary is indeterminate, one that never started
		// failed.
		if _, err := tx.ExecContext(ctx, qCancelHostPending, now, s.host); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, qSettleHostEffects, now, s.host); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, qInterruptAttempts, string(reason), now, s.host)
		if err != nil {
			return err
		}
		closed, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return ids, int(closed), nil
}
