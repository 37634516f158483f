package store

import (
	"context"
	"database/sql"
	"errors"
)

// A run is lost when its task is live in the store, leased to this host, and
// no run of the host holds it: a write whose acknowledgement was lost with
// the store's connection (the claim or finish committed, the runner was told
// it failed) can leave a task so. The runner finds such tasks with
// LeasedRuns and ends them with InterruptRuns (run_lost); a lost host's
// tasks are another host's to sweep (SweepLostHosts, host_lost). Both end a
// task the same way, by loseRun.

// RunRef names one run of one task.
type RunRef struct {
	PrincipalID, TaskID string
	RunID               int64 // the lease epoch
}

// MaxLeasedRuns bounds what one LeasedRuns call returns; a host runs at most
// max_concurrent tasks, far fewer.
const MaxLeasedRuns = 1000

const qLeasedRuns = `SELECT principal_id, id, run_id FROM tasks
	WHERE status IN ('running', 'waiting_approval') AND lease_host = $1 ORDER BY seq LIMIT $2`

// LeasedRuns lists the live (running or waiting_approval) tasks leased to
// this host (Options.HostID; "" for the unnamed host), oldest first, at most
// MaxLeasedRuns.
func (s *Store) LeasedRuns(ctx context.Context) ([]RunRef, error) {
	rows, err := s.readRows(ctx, qLeasedRuns, s.host, MaxLeasedRuns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RunRef
	for rows.Next() {
		var r RunRef
		if err := rows.Scan(&r.PrincipalID, &r.TaskID, &r.RunID); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// InterruptRuns moves each of runs (as LeasedRuns returned them) to interrupted with reason (run_lost) and
// message, by a compare-and-set on (status live, run id, lease host = this
// host): a run that ended, or a task taken over, since the caller looked is
// skipped. Each task's running attempt is closed, its effects settled
// (dispatching → indeterminate), its pending approvals cancelled and
// events(t) appended, all in one transaction; the wall time since the
// task's last write is charged, up to chargeWallMillis. It returns the ids
// of the tasks it interrupted, in the order given.
func (s *Store) InterruptRuns(ctx context.Context, runs []RunRef, reason Reason, message string, chargeWallMillis int64, events func(t Task) []NewEvent) ([]string, error) {
	switch {
	case len(runs) > MaxLeasedRuns:
		return nil, invalidf("at most %d runs at once, got %d", MaxLeasedRuns, len(runs))
	case chargeWallMillis < 0:
		return nil, invalidf("wall charge must not be negative")
	}
	if err := checkReason(reason); err != nil {
		return nil, err
	}
	if err := checkSize("message", len(message), s.lim.Message); err != nil {
		return nil, err
	}
	lost := make([]lostRun, len(runs))
	for i, r := range runs {
		lost[i] = lostRun{id: r.TaskID, run: r.RunID, host: s.host, reason: reason, message: message}
	}
	var ids []string
	err := s.write(ctx, func(tx *txn) error {
		var err error
		ids, err = s.loseRuns(ctx, tx, lost, nanos(s.now()), chargeWallMillis, events)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// loseRuns is loseRun for each of lost, in order; it returns the ids of the
// tasks it ended.
func (s *Store) loseRuns(ctx context.Context, tx *txn, lost []lostRun, ns, chargeWallMillis int64, events func(t Task) []NewEvent) ([]string, error) {
	var ids []string
	for _, l := range lost {
		t, ok, err := s.loseRun(ctx, tx, l, ns, chargeWallMillis, events)
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, t.ID)
		}
	}
	return ids, nil
}

// lostRun is one run to end because no live run holds it.
type lostRun struct {
	id, host string
	run      int64
	reason   Reason
	message  string
}

// loseRun ends run l inside tx if its task is still live in that run on
// that host (false, nil otherwise): the task interrupted, its running
// attempt closed, its effects settled, its approvals cancelled, events(t)
// appended.
func (s *Store) loseRun(ctx context.Context, tx *txn, l lostRun, ns, chargeWallMillis int64, events func(t Task) []NewEvent) (Task, bool, error) {
	t, err := scanTask(tx.QueryRowContext(ctx, qLoseLease, l.message, ns, chargeWallMillis, l.id, l.run, l.host, string(l.reason)))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, false, nil
	}
	if err != nil {
		return Task{}, false, err
	}
	tx.wrote(t.ID) // the row is locked until tx ends
	if _, err := tx.ExecContext(ctx, qLoseAttempts, ns, t.ID, string(l.reason)); err != nil {
		return Task{}, false, err
	}
	if _, err := tx.ExecContext(ctx, qSettleTaskEffects, ns, t.ID, t.PrincipalID); err != nil {
		return Task{}, false, err
	}
	if _, err := tx.ExecContext(ctx, qCancelApprovals, ns, t.ID); err != nil {
		return Task{}, false, err
	}
	if events != nil {
		evs := events(t)
		if err := s.checkEvents(evs); err != nil {
			return Task{}, false, err
		}
		if _, err := s.appendEvents(ctx, tx, t.ID, t.RunID, evs); err != nil {
			return Task{}, false, err
		}
	}
	return t, true, nil
}
