package store

import (
	"context"
	"errors"
	"fmt"
)

// The queue is the store's pending tasks, oldest first by queued_ns (when
// the task last entered the queue: its creation, or the resume that
// enqueued it), then seq. It is one queue for every host sharing the
// store: a host with a free slot takes the head it may run (Queued), and
// the compare-and-set of StartRun makes sure only one host starts it.
//
// A task may be held for one host (queue_host): one created with files
// in the workspace of the host that created it. '' is any host.

// MaxQueueLimit bounds a queue bound ([tasks] max_queued).
const MaxQueueLimit = 1024

// maxQueueRead bounds the rows one read of the queue returns: the bound
// of the queue, and room for pending tasks an older binary left.
const maxQueueRead = 4 * MaxQueueLimit

// ErrQueueFull: the queue holds as many pending tasks as its bound
// allows; nothing was written. It is always a *QueueFullError.
var ErrQueueFull = errors.New("queue full")

// QueueFullError is a create or resume refused because the queue is full.
type QueueFullError struct {
	Limit  int   // the bound: [tasks] max_queued
	Queued int64 // pending tasks the store held
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("%d tasks are already queued (tasks.max_queued = %d): nothing was queued, try again when one starts", e.Queued, e.Limit)
}

func (e *QueueFullError) Is(t error) bool { return t == ErrQueueFull }

// pgQueueLock is the advisory lock that serialises admissions to the
// queue on PostgreSQL, where two transactions could otherwise both count
// the queue one short of its bound ("tskq").
const pgQueueLock = 0x74736b71

const (
	qCountQueued = `SELECT count(*) FROM tasks WHERE status = 'pending'`
	qQueueMark   = `UPDATE tasks SET queued_ns = $1, queue_host = $2 WHERE id = $3`
	qQueuedTasks = `SELECT ` + taskListCols + ` FROM tasks WHERE status = 'pending' AND queue_host IN ('', $1) ORDER BY queued_ns, seq LIMIT $2`
	qQueueOrder  = `SELECT id FROM tasks WHERE status = 'pending' ORDER BY queued_ns, seq LIMIT $1`
)

// admit takes the queue's lock where the engine needs one and refuses
// when the queue already holds limit pending tasks.
func (s *Store) admit(ctx context.Context, tx *txn, limit int) error {
	if _, ok := s.d.(pgDialect); ok {
		if _, err := tx.tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgQueueLock)); err != nil {
			return err
		}
	}
	var n int64
	if err := tx.tx.QueryRowContext(ctx, qCountQueued).Scan(&n); err != nil {
		return err
	}
	if n >= int64(limit) {
		return &QueueFullError{Limit: limit, Queued: n}
	}
	return nil
}

func checkQueueLimit(limit int) error {
	if limit < 1 || limit > MaxQueueLimit {
		return invalidf("queue bound %d: must be 1..%d", limit, MaxQueueLimit)
	}
	return nil
}

// CreateQueued stores a new pending task at the tail of the queue, with
// its events, in one transaction — unless the queue already holds limit
// (1..MaxQueueLimit) pending tasks: then it is a *QueueFullError and
// nothing is written. With pin, only this store's host may start it.
func (s *Store) CreateQueued(ctx context.Context, nt NewTask, limit int, pin bool, events ...NewEvent) (Task, error) {
	if err := checkQueueLimit(limit); err != nil {
		return Task{}, err
	}
	if err := s.checkNewTask(nt, events); err != nil {
		return Task{}, err
	}
	host := ""
	if pin {
		host = s.host
	}
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		if err := s.admit(ctx, tx, limit); err != nil {
			return err
		}
		now := nanos(s.now())
		var err error
		if t, err = s.insertTask(ctx, tx, nt, now, events); err != nil {
			return err
		}
		_, err = tx.exec(ctx, qQueueMark, now, host, t.ID)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// Enqueue moves principal's interrupted task id to the tail of the queue
// (pending, its reason cleared), with its events, unless the queue
// already holds limit pending tasks (*QueueFullError). Its next start is
// a resume: run id + 1, what is left of each budget.
func (s *Store) Enqueue(ctx context.Context, principal, id string, limit int, events ...NewEvent) (Task, error) {
	if err := checkQueueLimit(limit); err != nil {
		return Task{}, err
	}
	if err := s.checkEvents(events); err != nil {
		return Task{}, err
	}
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		if err := s.admit(ctx, tx, limit); err != nil {
			return err
		}
		var stored int64
		var err error
		if t, stored, err = s.transition(ctx, tx, &transitionParams{PrincipalID: principal, TaskID: id,
			From: []Status{StatusInterrupted}, To: StatusPending, Events: len(events)}); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, qQueueMark, nanos(s.now()), "", t.ID); err != nil {
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

// Queued returns up to limit pending tasks this store's host may start,
// every principal's, head of the queue first. Listed tasks carry no
// checkpoint.
func (s *Store) Queued(ctx context.Context, limit int) ([]Task, error) {
	if limit <= 0 || limit > maxQueueRead {
		limit = maxQueueRead
	}
	return s.queryTasks(ctx, qQueuedTasks, s.host, limit)
}

// CountQueued counts the pending tasks of every principal.
func (s *Store) CountQueued(ctx context.Context) (int64, error) {
	var n int64
	if err := s.readRow(ctx, qCountQueued).Scan(&n); err != nil {
		return 0, s.dbErr(fmt.Errorf("store: count the queue: %w", err))
	}
	return n, nil
}

// QueuePositions maps the id of each pending task, every principal's, to
// its place in the queue (1 is the head). It reads at most 4096 tasks;
// one further back has no entry.
func (s *Store) QueuePositions(ctx context.Context) (map[string]int64, error) {
	rows, err := s.readRows(ctx, qQueueOrder, maxQueueRead)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	pos := map[string]int64{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		pos[id] = int64(len(pos) + 1)
	}
	return pos, rows.Err()
}
