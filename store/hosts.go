package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/internal/text"
)

// Fleets: several hosts sharing one store.
//
// Every host has an id (Options.HostID) and a row in hosts that it
// refreshes with HeartbeatHost. A task's run is leased to the host that
// started it: StartRun (and every other change into running from pending or
// interrupted) writes the starting host into the task's lease_host in the
// same compare-and-set that bumps run_id. The run id is the lease epoch — the
// fencing token: it grows on every start, resume and takeover, and every
// write of a run (claim, effect, finish, heartbeat, events) already carries
// it in its compare-and-set. A write whose run id is not the task's current
// one matches no row and is refused with a *TransitionError that matches
// ErrFenced, so a host that lost its lease (paused, partitioned, presumed
// dead) can never overwrite a newer run, whatever it does when it wakes.
//
// A lease lapses when its host's heartbeat is older than the lease duration.
// SweepLostHosts, run by every live host, moves each live task of a lapsed
// host to interrupted (host_lost) by a compare-and-set on (status, run id,
// lease host) — so of two sweepers, or a sweeper and the owner finishing the
// step, exactly one wins — and closes that task's running attempt, settles
// its effects (dispatching → indeterminate) and cancels its pending
// approvals, as start-up recovery does for the host's own tasks. Nothing is
// resumed: a resume is explicit and, on whichever host receives it, starts a
// new run (a new epoch) leased to that host.
//
// On PostgreSQL the sweep locks its candidates FOR NO KEY UPDATE SKIP
// LOCKED, in seq order: a task whose row another transaction holds is being
// written — by its owner, so it is not lost, or by another sweeper — and is
// left for the next sweep, so a sweep never waits behind a host's write.
// It reads the hosts' heartbeats without locking them, and HeartbeatHost is
// one autocommit UPDATE of the host's own row on a connection of its own:
// the two never conflict. When a sweep may run, and when a host stops its
// own runs because it cannot heartbeat, is the host's to decide (host's
// fleet.go: grace and self-fencing); LoseOwnRun is how a host that fenced
// itself ends those runs once the store answers.
//
// Heartbeats and the sweep's cut-off are host wall clocks: the hosts of a
// fleet must keep their clocks synchronised to well within the lease.

// MaxHostID bounds a host id.
const MaxHostID = 64

// MaxSweep bounds the tasks one SweepLostHosts call interrupts; the next
// sweep takes the rest.
const MaxSweep = 100

// CheckHostID refuses a host id that is empty, longer than MaxHostID bytes
// or has a byte outside [A-Za-z0-9._-].
func CheckHostID(id string) error {
	if id == "" || len(id) > MaxHostID {
		return invalidf("host_id must be 1..%d bytes, got %d (%q)", MaxHostID, len(id), text.Clip(id, MaxHostID+8))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return invalidf("host_id %q has byte %#x at %d: only [A-Za-z0-9._-] are allowed", text.Clip(id, MaxHostID+8), c, i)
		}
	}
	return nil
}

// Host is one host of a fleet, as its last heartbeat left it.
type Host struct {
	ID          string
	Version     string
	StartedAt   time.Time
	HeartbeatAt time.Time
}

// Lease is who holds a task's current run.
type Lease struct {
	Status Status
	Reason Reason
	RunID  int64  // the lease epoch
	Host   string // "" for an unnamed host or a run from before fleets
}

// HostID is Options.HostID.
func (s *Store) HostID() string { return s.host }

const (
	qRegisterHost = `INSERT INTO hosts (id, version, started_ns, heartbeat_ns) VALUES ($1, $2, $3, $3)
		ON CONFLICT (id) DO UPDATE SET version = excluded.version, started_ns = excluded.started_ns,
			heartbeat_ns = excluded.heartbeat_ns`
	// A heartbeat never moves backwards (a late one after a newer one).
	qHeartbeatHost = `UPDATE hosts SET heartbeat_ns = CASE WHEN heartbeat_ns < $1 THEN $1 ELSE heartbeat_ns END WHERE id = $2`
	qListHosts     = `SELECT id, version, started_ns, heartbeat_ns FROM hosts ORDER BY id LIMIT 1000`
	// Live tasks of hosts other than $1 whose heartbeat is older than $2 —
	// or that have no row at all.
	qLostLeases = `SELECT id, run_id, lease_host FROM tasks
		WHERE status IN ('running', 'waiting_approval') AND lease_host <> '' AND lease_host <> $1
			AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = tasks.lease_host AND h.heartbeat_ns >= $2)
		ORDER BY seq LIMIT $3`
	// The compare-and-set of one takeover: the task must still be live in
	// the run and on the host the sweep saw. Wall time grows by $3, capped
	// at the limit (never lowered).
	// qLoseLease charges the lost run $3 ms of wall time, but never more
	// than has passed since the task's row was last written (no reading of
	// the run's wall time is older than that write), so a task lost a
	// moment after it started is not charged time that never passed.
	qLoseLease = `UPDATE tasks SET status = 'interrupted', reason = $7, message = $1,
			wall_ms_used = CASE WHEN wall_ms_used >= wall_ms_limit THEN wall_ms_used
				WHEN wall_ms_used + ` + lostCharge + ` < wall_ms_limit THEN wall_ms_used + ` + lostCharge + ` ELSE wall_ms_limit END,
			updated_ns = $2
		WHERE id = $4 AND run_id = $5 AND lease_host = $6 AND status IN ('running', 'waiting_approval')
		RETURNING ` + taskCols
	qLoseAttempts = `UPDATE attempts SET status = 'interrupted', reason = $3, ended_ns = $1
		WHERE task_id = $2 AND status = 'running'`
	qTaskLease = `SELECT status, reason, run_id, lease_host FROM tasks WHERE id = $1 AND principal_id = $2`
)

// lostCharge is min($3, the milliseconds from the row's last write to $2),
// at least 0, in SQL both engines read alike.
const lostCharge = `(CASE WHEN $2 <= updated_ns THEN 0 WHEN ($2 - updated_ns) / 1000000 < $3 THEN ($2 - updated_ns) / 1000000 ELSE $3 END)`

func hostQueries() []string {
	return []string{qRegisterHost, qHeartbeatHost, qLostLeases, qLoseLease, qLoseAttempts, qEndRun}
}

// RegisterHost records this host (Options.HostID) as started now, running
// version (at most 64 bytes), with a fresh heartbeat. A host that restarts
// under the same id takes its row over.
func (s *Store) RegisterHost(ctx context.Context, version string) error {
	if err := CheckHostID(s.host); err != nil {
		return err
	}
	if err := checkSize("version", len(version), 64); err != nil {
		return err
	}
	return s.write(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, qRegisterHost, s.host, version, nanos(s.now()))
		return err
	})
}

// HeartbeatHost refreshes this host's heartbeat. ErrNotFound if the host
// never registered (or its row was removed): register again.
//
// It is one autocommit UPDATE of this host's own row — no transaction, no
// retry — and on PostgreSQL it runs on a connection of its own, outside the
// pool every other write shares: a heartbeat waits for nothing but the
// server. Nothing else locks a host row except a re-registration of the
// same host, and the sweep reads the heartbeats without locking them, so it
// never conflicts with one.
func (s *Store) HeartbeatHost(ctx context.Context) error {
	if err := CheckHostID(s.host); err != nil {
		return err
	}
	if s.w == nil {
		return ErrReadOnly
	}
	db := s.hb
	if db == nil {
		db = s.w
	}
	res, err := db.ExecContext(ctx, qHeartbeatHost, nanos(s.now()), s.host)
	if err != nil {
		return s.dbErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.dbErr(err)
	} else if n == 0 {
		return fmt.Errorf("host %s is not registered: %w", s.host, ErrNotFound)
	}
	return nil
}

// ListHosts returns the fleet's hosts (at most 1000), by id.
func (s *Store) ListHosts(ctx context.Context) ([]Host, error) {
	rows, err := s.readRows(ctx, qListHosts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Host
	for rows.Next() {
		var h Host
		var started, beat int64
		if err := rows.Scan(&h.ID, &h.Version, &started, &beat); err != nil {
			return nil, err
		}
		h.StartedAt, h.HeartbeatAt = fromNanos(started), fromNanos(beat)
		out = append(out, h)
	}
	return out, rows.Err()
}

// SweepLostHosts interrupts (host_lost) up to MaxSweep live tasks leased to
// other hosts whose heartbeat is older than lease, each by its own
// compare-and-set, with its running attempt closed, its effects settled, its
// pending approvals cancelled and events(t) appended, all in one
// transaction. chargeWallMillis is charged to each (capped at its limit):
// the owner's last wall heartbeat is up to that old. It returns the ids of
// the tasks it took, oldest first; a task another sweeper (or its owner)
// changed first is skipped. The same transaction closes the attempts a
// lost host left running under tasks that left their run meanwhile (a
// cancel or a pause through another host), as their runner would have.
func (s *Store) SweepLostHosts(ctx context.Context, lease time.Duration, chargeWallMillis int64, events func(t Task) []NewEvent) ([]string, error) {
	switch {
	case lease <= 0:
		return nil, invalidf("lease must be positive, got %s", lease)
	case chargeWallMillis < 0:
		return nil, invalidf("wall charge must not be negative")
	}
	var ids []string
	err := s.write(ctx, func(tx *txn) error {
		ids = nil
		now := s.now()
		type lost struct {
			id, host string
			run      int64
		}
		// On PostgreSQL the candidates are locked as they are read, in
		// seq order, passing over any another transaction holds: its
		// owner (or another sweeper) is writing it, and a task whose owner
		// writes it is not lost. The compare-and-set below re-checks each.
		rows, err := tx.query(ctx, qLostLeases+s.d.forUpdate("tasks", true), s.host, nanos(now.Add(-lease)), MaxSweep)
		if err != nil {
			return err
		}
		var found []lost
		for rows.Next() {
			var l lost
			if err := rows.Scan(&l.id, &l.run, &l.host); err != nil {
				rows.Close()
				return err
			}
			found = append(found, l)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		runs := make([]lostRun, len(found))
		for i, l := range found {
			msg := fmt.Sprintf("host %s missed its heartbeats for over %s", l.host, lease)
			runs[i] = lostRun{id: l.id, run: l.run, host: l.host, reason: ReasonHostLost, message: msg}
		}
		if ids, err = s.loseRuns(ctx, tx, runs, nanos(now), chargeWallMillis, events); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qCloseLostAttempts, nanos(now), s.host, nanos(now.Add(-lease)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// LoseOwnRun is a sweep of one of this host's own runs: a host that
// stopped run runID of task id because it could not reach the store for
// most of a lease (it fenced itself) ends it, once the store answers
// again, exactly as another host's sweep would have — interrupted
// (host_lost, message), its running attempt closed, its effects settled,
// its approvals cancelled, events(t) appended. ok is false, with nothing
// written but the closing of that run's attempt if it is still running
// (closeStoppedAttempt), when the task is no longer live in that run on this
// host (a sweep, a cancel got there first).
func (s *Store) LoseOwnRun(ctx context.Context, id string, runID int64, message string, events func(t Task) []NewEvent) (ok bool, err error) {
	if err := checkSize("message", len(message), s.lim.Message); err != nil {
		return false, err
	}
	err = s.write(ctx, func(tx *txn) error {
		ns := nanos(s.now())
		_, ok, err = s.loseRun(ctx, tx, lostRun{id: id, run: runID, host: s.host, reason: ReasonHostLost, message: message}, ns, 0, events)
		if err != nil || ok {
			return err
		}
		return closeStoppedAttempt(ctx, tx, id, runID, ns)
	})
	return ok, err
}

// closeStoppedAttempt closes, inside tx, the attempt of run runID of task
// id left running when the run was stopped: the task left the run under it
// (a cancel from another host while this one could not reach the store),
// so no sweep of live tasks closes it, and the runner that would have
// (abandon) wrote nothing once fenced. A newer run's attempts are never
// touched, nor is anything written when none is running.
func closeStoppedAttempt(ctx context.Context, tx *txn, id string, runID, ns int64) error {
	if err := tx.lockTaskRow(ctx, id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, qCloseRunAttempt, ns, id, runID)
	return err
}

// attemptEndsAsTask sets an attempt left running under a task that left
// its run to the end its runner would have given it (abandon): cancelled
// or failed with the task's reason, interrupted with user_pause for a
// pause, otherwise interrupted (host_lost). $1 is the time.
const attemptEndsAsTask = `UPDATE attempts SET ended_ns = $1,
		status = (SELECT CASE WHEN t.status IN ('cancelled', 'failed') THEN t.status ELSE 'interrupted' END
			FROM tasks t WHERE t.id = attempts.task_id),
		reason = (SELECT CASE WHEN t.status IN ('cancelled', 'failed') OR t.reason = 'user_pause' THEN t.reason ELSE 'host_lost' END
			FROM tasks t WHERE t.id = attempts.task_id)`

const (
	qCloseRunAttempt = attemptEndsAsTask + `
		WHERE task_id = $2 AND run_id = $3 AND status = 'running'`
	// The running attempts of tasks that left their run (cancelled,
	// failed, paused through another host) on a host lost since: its
	// runner will never close them. $2 is this host, $3 the oldest
	// heartbeat a live host has.
	qCloseLostAttempts = attemptEndsAsTask + `
		WHERE status = 'running' AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = attempts.task_id
			AND t.run_id = attempts.run_id AND t.status NOT IN ('running', 'waiting_approval')
			AND t.lease_host <> '' AND t.lease_host <> $2
			AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = t.lease_host AND h.heartbeat_ns >= $3))`
)

// TaskLease returns who holds principal's task id and in which run: a host
// polls it for the runs it holds, to learn of a cancel, an approval or a
// takeover committed by another host.
func (s *Store) TaskLease(ctx context.Context, principal, id string) (Lease, error) {
	var l Lease
	err := s.readRow(ctx, qTaskLease, id, principal).Scan(&l.Status, &l.Reason, &l.RunID, &l.Host)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, notFound(id)
	}
	return l, err
}

const qEndRun = `UPDATE tasks SET status = $1, reason = $2, message = $3, updated_ns = $4, events_stored = events_stored + $8
	WHERE id = $5 AND principal_id = $6 AND run_id = $7 AND status IN ('running', 'waiting_approval')
	RETURNING ` + taskCols + `, events_stored`

// EndRun is the end of a task's run outside any attempt.
type EndRun struct {
	PrincipalID, TaskID string
	RunID               int64  // the lease epoch the caller acts for
	To                  Status // interrupted or failed
	Reason              Reason
	Message             string
	Events              []NewEvent
}

// EndRun ends run e.RunID of a live task outside any attempt: e.To is
// interrupted or failed. It is Transition fenced by the lease epoch: a run
// that is over (a takeover started a newer one) gets a *TransitionError
// matching ErrFenced, and one whose task already left running (a cancel, a
// sweep) a *TransitionError naming the current status; nothing is written
// either way.
func (s *Store) EndRun(ctx context.Context, e EndRun) (Task, error) {
	principal, id, runID, to, reason, message, events := e.PrincipalID, e.TaskID, e.RunID, e.To, e.Reason, e.Message, e.Events
	if to != StatusInterrupted && to != StatusFailed {
		return Task{}, invalidf("a run ends as interrupted or failed, not %q", to)
	}
	if err := checkReason(reason); err != nil {
		return Task{}, err
	}
	if err := checkSize("message", len(message), s.lim.Message); err != nil {
		return Task{}, err
	}
	if err := s.checkEvents(events); err != nil {
		return Task{}, err
	}
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		var err error
		var stored int64
		t, err = scanTask(tx.QueryRowContext(ctx, qEndRun, string(to), string(reason), message, nanos(s.now()), id, principal, runID,
			len(events)), &stored)
		if errors.Is(err, sql.ErrNoRows) {
			cur, run, err := taskState(ctx, tx, principal, id)
			if err != nil {
				return err
			}
			return &TransitionError{TaskID: id, Current: cur, To: to, RunID: run, WantRunID: runID}
		}
		if err != nil {
			return err
		}
		if err := s.settleApprovals(ctx, tx, t); err != nil {
			return err
		}
		_, err = s.storeEvents(ctx, tx, t.ID, t.RunID, stored, events)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// MaxHostLoads bounds HostLoads.
const MaxHostLoads = 1000

// HostLoad is a host with the count of the live tasks leased to it.
type HostLoad struct {
	Host
	// Owned counts its tasks that are running or waiting_approval with
	// lease_host = ID: the runs it holds, or held when it was lost and no
	// sweep has taken them yet.
	Owned int64
}

// The count reads the tasks_lease partial index, one probe per host.
const qHostLoads = `SELECT h.id, h.version, h.started_ns, h.heartbeat_ns,
		(SELECT COUNT(*) FROM tasks t WHERE t.lease_host = h.id AND t.status IN ('running', 'waiting_approval'))
	FROM hosts h ORDER BY h.id LIMIT $1`

// HostLoads returns up to limit (1..MaxHostLoads) hosts by id, each with
// the live tasks it owns, in one read; more reports that there are further
// hosts past limit.
func (s *Store) HostLoads(ctx context.Context, limit int) (hosts []HostLoad, more bool, err error) {
	if limit < 1 || limit > MaxHostLoads {
		return nil, false, invalidf("host list limit must be 1..%d, got %d", MaxHostLoads, limit)
	}
	rows, err := s.readRows(ctx, qHostLoads, limit+1)
	if err != nil {
		return nil, false, s.dbErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var h HostLoad
		var started, beat int64
		if err := rows.Scan(&h.ID, &h.Version, &started, &beat, &h.Owned); err != nil {
			return nil, false, s.dbErr(err)
		}
		h.StartedAt, h.HeartbeatAt = fromNanos(started), fromNanos(beat)
		hosts = append(hosts, h)
	}
	if err := rows.Err(); err != nil {
		return nil, false, s.dbErr(err)
	}
	if len(hosts) > limit {
		return hosts[:limit], true, nil
	}
	return hosts, false, nil
}
