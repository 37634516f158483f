package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"
)

// dialect is how the SQL engines behind a Store behave apart from their
// statements' text (engineSQL holds the statements written per engine):
// how write transactions begin, which failures are worth another try, how
// errors classify and rows lock. No statement's text is rewritten: each
// is sent as written. Open and OpenPostgres choose one; nothing outside the
// store sees it.
type dialect interface {
	// bind adjusts arguments the engine would refuse (see pgDialect.bind).
	bind(args []any) []any
	// writeTx and readTx are the options of a write transaction and of a
	// consistent multi-statement read.
	writeTx() *sql.TxOptions
	readTx() *sql.TxOptions
	// retryable reports a write transaction that failed only because a
	// concurrent one won (SQLite's single writer never sees one).
	retryable(err error) bool
	// connLost reports a failure of the connection itself (the server
	// ended the session, a restart, a network cut): a transaction that met
	// it before its COMMIT was sent did not commit, and may run again on
	// another connection.
	connLost(err error) bool
	// classify makes an engine error one of the store's typed errors
	// (ErrReadOnly, *UnavailableError) naming where; others pass unchanged.
	classify(where string, err error) error
	// constraint reports a violated constraint: a unique key, a CHECK.
	constraint(err error) bool
	// lockTask is a statement that locks task $1's row until the
	// transaction ends, or "" where the single writer already serialises.
	lockTask() string
	// forUpdate is the clause that makes a SELECT lock the rows of table
	// it returns (skipLocked: and pass over rows another transaction has
	// locked), or "" where the single writer already serialises.
	forUpdate(table string, skipLocked bool) string
}

// sqliteDialect is the embedded default: the query text is already its own,
// and one writer connection serialises every write.
type sqliteDialect struct{}

func (sqliteDialect) bind(args []any) []any         { return args }
func (sqliteDialect) writeTx() *sql.TxOptions       { return nil } // IMMEDIATE, from the DSN
func (sqliteDialect) readTx() *sql.TxOptions        { return nil } // a WAL snapshot
func (sqliteDialect) retryable(error) bool          { return false }
func (sqliteDialect) connLost(error) bool           { return false }
func (sqliteDialect) constraint(err error) bool     { return sqliteCode(err) == sqliteConstraint }
func (sqliteDialect) lockTask() string              { return "" }
func (sqliteDialect) forUpdate(string, bool) string { return "" }
func (sqliteDialect) classify(where string, err error) error {
	switch sqliteCode(err) {
	case sqliteReadOnly:
		return fmt.Errorf("store file %s is read-only (check the file's and the data dir's permissions): %w: %w",
			where, ErrReadOnly, err)
	case sqliteFull:
		return &UnavailableError{Class: "disk full", Err: fmt.Errorf("store file %s: %w", where, err)}
	case sqliteIOErr:
		return &UnavailableError{Class: "I/O error", Err: fmt.Errorf("store file %s: %w", where, err)}
	}
	return err
}

// maxWriteTries bounds how often a write transaction that lost a race
// (PostgreSQL's deadlock or serialization failure, or a session the server
// ended for idling) is run again before the store reports itself busy. On
// READ COMMITTED with the task row locked first, none of these should
// happen in normal operation: the bound is for the exception.
const maxWriteTries = 10

// write runs fn in one write transaction and commits it if fn returns nil.
// Every multi-row change goes through here, so either all of it is stored
// or none of it. fn may run more than once (a transaction that lost a race,
// or whose connection was lost before its COMMIT was sent, is retried from
// the start on another connection): it must set, not accumulate, what it
// returns.
func (s *Store) write(ctx context.Context, fn func(tx *txn) error) error {
	if s.w == nil {
		return ErrReadOnly
	}
	var err error
	for try := range maxWriteTries {
		err = s.writeOnce(ctx, fn)
		var lost *lostConnError
		switch {
		case errors.As(err, &lost) && ctx.Err() == nil:
			s.observeRetry(retryCode(lost.err))
		case err == nil || !s.d.retryable(err):
			if err != nil && errors.Is(err, ErrFenced) {
				s.observeFenced()
			}
			return s.dbErr(err)
		default:
			s.observeRetry(retryCode(err))
		}
		if werr := backoff(ctx, try); werr != nil {
			return s.dbErr(err)
		}
	}
	if lost := (*lostConnError)(nil); errors.As(err, &lost) {
		return s.dbErr(lost.err) // the server is gone: unavailable, not busy
	}
	return &UnavailableError{Class: "busy", Err: fmt.Errorf("store %s: a write lost to concurrent writes %d times: %w", s.path, maxWriteTries, err)}
}

// lostConnError is a write transaction's connection lost before its
// COMMIT was sent: nothing of it committed.
type lostConnError struct{ err error }

func (e *lostConnError) Error() string { return e.err.Error() }
func (e *lostConnError) Unwrap() error { return e.err }

func (s *Store) writeOnce(ctx context.Context, fn func(tx *txn) error) error {
	start := time.Now()
	ticket, err := s.commitOnce(ctx, fn)
	if err != nil {
		return err
	}
	if err := s.sync.wait(ticket); err != nil {
		return err
	}
	s.observeCommit(time.Since(start))
	return s.fault(true)
}

// commitOnce runs fn in one write transaction and commits it, returning the
// commit's durability ticket (walSync), which the caller waits for.
func (s *Store) commitOnce(ctx context.Context, fn func(tx *txn) error) (uint64, error) {
	if err := s.sync.failed(); err != nil {
		return 0, err
	}
	tx, err := s.w.BeginTx(ctx, s.d.writeTx())
	if err != nil {
		return 0, s.beforeCommit(err)
	}
	if err := fn(&txn{tx: tx, s: s}); err != nil {
		tx.Rollback() //nolint:errcheck // fn's error is the one to report
		return 0, s.beforeCommit(err)
	}
	if err := s.fault(false); err != nil {
		tx.Rollback() //nolint:errcheck // the injected fault is the one to report
		return 0, err
	}
	return s.commit(tx)
}

// commit commits tx under a durability ticket. A connection lost during
// the COMMIT leaves its outcome unknown: it is reported, never run again.
func (s *Store) commit(tx *sql.Tx) (uint64, error) {
	ticket := s.sync.begin()
	err := tx.Commit()
	s.sync.end(ticket)
	return ticket, err
}

// fault is Options.WriteFault's verdict on a commit, nil without one.
func (s *Store) fault(committed bool) error {
	if s.writeFault == nil {
		return nil
	}
	return s.writeFault(committed)
}

// beforeCommit marks err, met before the COMMIT was sent, as a lost
// connection when it is one.
func (s *Store) beforeCommit(err error) error {
	if s.d.connLost(err) {
		return &lostConnError{err: err}
	}
	return err
}

// retryCode names a retried transaction's failure for the retry metric:
// its SQLSTATE, or "connection" for a connection lost without one.
func retryCode(err error) string {
	if code := pgCode(err); code != "" {
		return code
	}
	return "connection"
}

// cleanText makes s acceptable to a PostgreSQL text column without changing
// its length, so that a value checked against a limit stays within it: each
// byte of an invalid UTF-8 sequence becomes '?', and NUL (which text cannot
// hold) becomes a space.
func cleanText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteByte('?')
		case r == 0:
			b.WriteByte(' ')
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// backoff waits before try+1 of a write that lost a race: a doubling,
// jittered delay from about 1 ms, so that two losers do not meet again.
func backoff(ctx context.Context, try int) error {
	d := time.Duration(1<<min(try, 7)) * time.Millisecond
	d += rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
