package store

import (
	"context"
	"sync"
	"time"
)

// maxGroup bounds how many write transactions share one commit: a group's
// transaction holds the single writer for the time of all its members'
// statements, so an unbounded one would hold every other write back.
const maxGroup = 64

// committer gives concurrent SQLite writers of the step path one commit —
// one fsync of the write-ahead log at synchronous=FULL — instead of one
// each. A caller queues its closure and waits. The first caller to find no
// leader leads: it takes up to maxGroup queued closures, runs each in its
// own savepoint of one write transaction, commits once and hands every
// member its result; then, if more callers queued meanwhile, it makes the
// first of them the next leader and returns, so no caller leads for longer
// than one group.
type committer struct {
	mu      sync.Mutex
	queue   []*member
	leading bool
	// hold, when set (by tests, before any write), is called by each
	// leader with the size of the group it took, before running it.
	hold func(n int)
}

// member is one caller's closure in a group. done receives exactly one
// outcome: the caller's result, or the order to lead the next group.
type member struct {
	ctx    context.Context // the caller's, without its cancellation
	fn     func(ctx context.Context, tx *txn) error
	err    error
	ticket uint64 // the durability ticket of the commit that stored it
	done   chan outcome
}

// outcome is a member's result, to be trusted once its ticket is durable
// (walSync.wait), or the order to lead.
type outcome struct {
	lead   bool
	err    error
	ticket uint64
}

func (m *member) run(tx *txn) error { return m.fn(m.ctx, tx) }

// queued is how many callers wait for a leader to take them.
func (c *committer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// writeGrouped is write for the step path: on a SQLite store several
// callers' transactions may share one commit (see committer); elsewhere —
// PostgreSQL, whose pool runs writes side by side, and where a transaction
// that waits on one task's lock must not hold up the others — it is write. Each closure still commits or not as a whole, and
// its caller sees the same result and error as from write.
//
// fn runs with ctx's values but never its cancellation: in a group, a
// cancelled context would interrupt the shared transaction, and SQLite
// rolls all of it back. ctx still keeps a caller that is already cancelled
// out of a group it has not joined.
func (s *Store) writeGrouped(ctx context.Context, fn func(ctx context.Context, tx *txn) error) error {
	c := s.group
	if c == nil {
		return s.write(ctx, func(tx *txn) error { return fn(ctx, tx) })
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &member{ctx: context.WithoutCancel(ctx), fn: fn, done: make(chan outcome, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, m)
	lead := !c.leading
	c.leading = true
	c.mu.Unlock()
	if !lead {
		if o := <-m.done; !o.lead {
			return s.durable(o.err, o.ticket)
		}
	}
	// A leader is always the head of the queue: the first caller found it
	// empty, and a leader hands over to the head.
	c.mu.Lock()
	group := c.queue[:min(len(c.queue), maxGroup)]
	c.queue = c.queue[len(group):]
	c.mu.Unlock()
	if c.hold != nil {
		c.hold(len(group))
	}
	start := time.Now()
	commits := s.runGroup(group)
	// The next group's statements run while this one's commit syncs: the
	// lead passes on before anyone waits for the fsync.
	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].done <- outcome{lead: true}
	} else {
		c.leading = false
		c.queue = nil // let the backing array of a large group go
	}
	c.mu.Unlock()
	for _, o := range group {
		if o != m {
			o.done <- outcome{err: o.err, ticket: o.ticket}
		}
	}
	var last uint64
	for _, o := range group {
		last = max(last, o.ticket)
	}
	if commits > 0 && s.sync.wait(last) == nil {
		for range commits {
			s.observeCommit(time.Since(start))
		}
	}
	return s.durable(m.err, m.ticket)
}

// durable is a write's result once its commit is on disk: err when the
// write failed, else the failure of the fsync if there was one.
func (s *Store) durable(err error, ticket uint64) error {
	if err != nil || ticket == 0 {
		return err
	}
	if err := s.sync.wait(ticket); err != nil {
		return err
	}
	return s.fault(true)
}

// runGroup runs group's closures, setting each member's err and ticket,
// and returns how many commits succeeded. A lone member runs exactly as
// write would run it.
func (s *Store) runGroup(group []*member) (commits int) {
	if len(group) > 1 {
		if ok, committed := s.writeTogether(group); ok {
			if committed {
				return 1
			}
			return 0
		}
	}
	// Alone, or the shared transaction is gone or in doubt: no member's
	// outcome may be reported from it, so each runs again alone.
	for _, m := range group {
		m.ticket, m.err = s.commitOnce(m.ctx, m.run)
		if m.err == nil {
			commits++
		}
		m.err = s.dbErr(m.err)
	}
	return commits
}

// writeTogether runs group's closures in one write transaction, each in a
// savepoint: a closure that fails is rolled back to its savepoint and keeps
// its error, and the others go on. One commit follows; its failure is every
// other member's. It reports false, with the transaction rolled back and no
// member's err to be trusted, when a savepoint could not be set, rolled
// back or released — SQLite may have rolled back the whole transaction
// (after a full disk, an I/O error), and a later member's statements would
// then run outside it.
func (s *Store) writeTogether(group []*member) (ok, committed bool) {
	// No member's cancellation may interrupt the others' statements.
	ctx := context.Background()
	if err := s.sync.failed(); err != nil {
		for _, m := range group {
			m.err = err
		}
		return true, false
	}
	tx, err := s.w.BeginTx(ctx, s.d.writeTx())
	if err != nil {
		for _, m := range group {
			m.err = s.dbErr(err)
		}
		return true, false
	}
	stored := 0
	for _, m := range group {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT member`); err != nil {
			tx.Rollback() //nolint:errcheck // the members run again alone
			return false, false
		}
		m.err = m.run(&txn{tx: tx, s: s})
		undo := []string{`RELEASE member`}
		if m.err != nil {
			undo = []string{`ROLLBACK TO member`, `RELEASE member`}
		} else {
			stored++
		}
		for _, q := range undo {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				tx.Rollback() //nolint:errcheck // the members run again alone
				return false, false
			}
		}
	}
	if stored == 0 {
		tx.Rollback() //nolint:errcheck // nothing to keep; each member has its refusal
		for _, m := range group {
			m.err = s.dbErr(m.err)
		}
		return true, false
	}
	var ticket uint64
	err = s.fault(false)
	if err != nil {
		tx.Rollback() //nolint:errcheck // the injected fault is every member's error
	} else {
		ticket, err = s.commit(tx)
	}
	for _, m := range group {
		// A refused member keeps its refusal: it had nothing to commit.
		if m.err == nil {
			m.err, m.ticket = err, ticket
		}
		m.err = s.dbErr(m.err)
	}
	return true, err == nil
}
