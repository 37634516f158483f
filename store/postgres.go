package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL error codes the store reacts to (Appendix A of its manual).
const (
	pgSerializationFailure = "40001"
	pgDeadlock             = "40P01"
	pgDiskFull             = "53100"
	pgOutOfMemory          = "53200"
	pgTooManyConnections   = "53300"
	pgReadOnlyTransaction  = "25006"
	pgAdminShutdown        = "57P01"
	pgCrashShutdown        = "57P02"
	pgCannotConnectNow     = "57P03"
	pgIdleInTxTimeout      = "25P03"
	pgInvalidCatalog       = "3D000" // the database does not exist
	pgInvalidPassword      = "28P01"
	pgInvalidAuthorization = "28000"
)

// Pool bounds for OpenPostgres: PoolOptions' zero fields take the defaults.
const (
	DefaultMaxOpenConns    = 16
	DefaultMaxIdleConns    = 16
	DefaultConnMaxLifetime = 30 * time.Minute
	DefaultIdleInTxTimeout = 10 * time.Second
)

// PoolOptions bound OpenPostgres's connection pool. A zero field takes its
// default; every connection, writer or reader, comes from this pool.
type PoolOptions struct {
	MaxOpenConns    int           // default DefaultMaxOpenConns
	MaxIdleConns    int           // default DefaultMaxIdleConns, at most MaxOpenConns
	ConnMaxLifetime time.Duration // default DefaultConnMaxLifetime
	// IdleInTxTimeout is how long the server lets one of this store's
	// sessions sit idle inside a transaction before it ends the session
	// (idle_in_transaction_session_timeout). A write transaction here is
	// milliseconds long; one that idles is a host paused or cut off
	// holding row locks, and every other host's write of those rows would
	// wait for it. In a fleet it must be well under the lease, so a lost
	// host's lock is gone before a live host sweeps its tasks. Default
	// DefaultIdleInTxTimeout; at least 100 ms.
	IdleInTxTimeout time.Duration
}

// pgDialect is PostgreSQL through pgx's database/sql adapter.
//
// Write transactions are READ COMMITTED, and each write path is correct at
// that level by locking, not by the engine's conflict detection:
//
//   - a path that changes a task changes (or locks) the task's row first —
//     a compare-and-set UPDATE on its status and run id, or lockTask — and
//     reads the task's other rows (attempts, effects, approvals) only
//     after, so they cannot change under it: every writer of those rows
//     holds the task's lock. A compare-and-set that waited for another
//     transaction's lock re-reads the row it waited for and re-checks its
//     WHERE (PostgreSQL's EvalPlanQual), so of two racing changes exactly
//     one matches.
//   - locks are taken in one order — the task row, then its dependent rows
//     — so two writers wait instead of deadlocking; a path that takes
//     several task rows (the lost-host sweep) takes them in seq order, and
//     the sweep passes over rows another transaction holds (SKIP LOCKED):
//     such a task's owner is writing it, so it is alive.
//   - inserts rely on unique keys (a task id, an attempt or effect number),
//     never on a read that found no row.
//   - the host heartbeat is one autocommit UPDATE of the host's own row on
//     a connection of its own (HeartbeatHost); no transaction reads that
//     row under a lock, so the sweep never conflicts with it.
//
// SERIALIZABLE would keep SQLite's single-writer meaning without any of
// this, but under contention it aborts transactions that conflict only
// through predicate reads (a heartbeat and a sweep), and a host that loses
// enough of those retries loses its lease. Deadlocks (40P01) and sessions
// ended for idling are still retried (maxWriteTries), and counted by
// SQLSTATE (Options.ObserveRetry); they should be rare.
type pgDialect struct{}

// bind cleans every string argument (cleanText): PostgreSQL's text refuses
// NUL and invalid UTF-8, which a plugin's stderr or summary may hold, and
// refusing the write would lose the step's outcome over a byte.
// The caller's slice is never changed: a copy is made at the first string
// that needs cleaning.
func (pgDialect) bind(args []any) []any {
	copied := false
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			continue
		}
		if c := cleanText(s); c != s {
			if !copied {
				args, copied = slices.Clone(args), true
			}
			args[i] = c
		}
	}
	return args
}

func (pgDialect) writeTx() *sql.TxOptions { return &sql.TxOptions{Isolation: sql.LevelReadCommitted} }
func (pgDialect) readTx() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
}

// retryable: besides PostgreSQL's own aborts, a transaction whose session
// the server ended for idling (this host was paused mid-write) is retried
// on a fresh connection; nothing of it committed.
func (pgDialect) retryable(err error) bool {
	code := pgCode(err)
	return code == pgSerializationFailure || code == pgDeadlock || code == pgIdleInTxTimeout
}

// connLost: a server that ended the session (57P01, pg_terminate_backend
// or a shutdown), a crash, a connection exception, or a socket that
// failed without a word. Not a full server or a refused connection: those
// are the server's answer, not a lost session.
func (pgDialect) connLost(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch code := pgCode(err); {
	case code == pgAdminShutdown || code == pgCrashShutdown || strings.HasPrefix(code, "08"):
		return true
	case code != "":
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return false // no session to lose: the server refused or is down
	}
	return pgUnavailable(err) == "server unavailable"
}

func (pgDialect) constraint(err error) bool { return strings.HasPrefix(pgCode(err), "23") }

// lockTask takes the task row's lock without changing the row, for a
// transaction that must hold it before touching the task's other rows
// (lockApprovalTask). NO KEY: the attempts and events referencing the task
// still insert. A transaction that has updated the row already holds the
// lock (txn.written) and skips it. Writers of events need no lockTask: the
// update that counts them (appendEvents, the step's task update) takes the
// row's lock before they are numbered — sequence numbers are handed out
// outside transactions, so without it two transactions could number a
// task's events in one order and commit them in the other, and a watcher
// past the later number would miss the earlier.
func (pgDialect) lockTask() string { return `SELECT 1 FROM tasks WHERE id = $1 FOR NO KEY UPDATE` }

// forUpdate: NO KEY, as lockTask.
func (pgDialect) forUpdate(table string, skipLocked bool) string {
	if skipLocked {
		return " FOR NO KEY UPDATE OF " + table + " SKIP LOCKED"
	}
	return " FOR NO KEY UPDATE OF " + table
}

func (pgDialect) classify(where string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if class := pgUnavailable(err); class != "" {
		return &UnavailableError{Class: class, Err: fmt.Errorf("store %s: %w", where, err)}
	}
	if pgCode(err) == pgReadOnlyTransaction {
		return fmt.Errorf("store %s is read-only (a standby, or default_transaction_read_only): %w: %w", where, ErrReadOnly, err)
	}
	return err
}

// pgCode is the SQLSTATE of a PostgreSQL error in err's chain, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// pgUnavailable names the class of a failure outside the request — the
// server is full, gone, restarting or out of connections, or lost the
// race too often — or returns "".
func pgUnavailable(err error) string {
	switch code := pgCode(err); {
	case code == pgDiskFull:
		return "disk full"
	case code == pgSerializationFailure || code == pgDeadlock:
		return "busy"
	case code == pgOutOfMemory || code == pgTooManyConnections:
		return "server overloaded"
	case code == pgAdminShutdown || code == pgCrashShutdown || code == pgCannotConnectNow,
		strings.HasPrefix(code, "08"): // connection exceptions
		return "server unavailable"
	case code != "":
		return ""
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	// A connection the server dropped without a word (killed, a network
	// cut) ends in EOF.
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "server unavailable"
	}
	return ""
}

// OpenPostgres opens the store in the PostgreSQL database dsn names (a URL
// or keyword/value string, as libpq reads it), checks it and migrates it to
// this binary's schema version. Several hosts may share the database; the
// schema is migrated once, under an advisory lock. Errors are *OpenError and
// never repeat the DSN's password. opts.Synchronous and opts.BusyTimeout are
// SQLite's and ignored; with opts.ReadOnly every session is read-only.
func OpenPostgres(ctx context.Context, dsn string, opts Options, pool PoolOptions) (*Store, error) {
	opts, err := opts.normalize()
	if err != nil {
		return nil, &OpenError{Path: "postgres", Op: "options", Err: err}
	}
	if pool, err = pool.normalize(); err != nil {
		return nil, &OpenError{Path: "postgres", Op: "options", Err: err}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN, password and all: keep it out.
		return nil, &OpenError{Path: "postgres", Op: "dsn",
			Err:  errors.New("the PostgreSQL DSN does not parse"),
			Hint: "give a URL (postgres://user@host/db) or key=value pairs (host=/run/postgresql dbname=taskhost)"}
	}
	where := describe(cfg)
	if opts.ReadOnly {
		cfg.RuntimeParams["default_transaction_read_only"] = "on"
	}
	if opts.dial != nil {
		cfg.DialFunc = opts.dial
	}
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(pool.IdleInTxTimeout.Milliseconds(), 10)
	// Every statement here is prepared once per session and looks rows up
	// by a task's or a principal's key: a generic plan is as good as a
	// custom one, and without this the server plans the step's statement
	// afresh at every execution (its generic cost estimate stays above the
	// custom plans'), which measured about 0.9 ms of a 2 ms step.
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(pool.MaxOpenConns)
	db.SetMaxIdleConns(pool.MaxIdleConns)
	db.SetConnMaxLifetime(pool.ConnMaxLifetime)
	s := &Store{path: where, d: pgDialect{}, q: pgSQL(), r: db, now: opts.Now, lim: opts.Limits,
		host: opts.HostID, listenCfg: cfg.Copy(), writeFault: opts.WriteFault}
	s.observe(opts)
	if !opts.ReadOnly {
		s.w = db
		// The heartbeat has a connection of its own: a pool whose every
		// connection is held (by steps waiting on a row lock, say) must
		// never delay the write that keeps this host's lease.
		s.hb = stdlib.OpenDB(*cfg.Copy())
		s.hb.SetMaxOpenConns(1)
		s.hb.SetMaxIdleConns(1)
		s.hb.SetConnMaxLifetime(pool.ConnMaxLifetime)
	}
	if err := s.openPG(ctx, opts.ReadOnly); err != nil {
		s.Close() //nolint:errcheck // the open error is the one to report
		return nil, err
	}
	return s, nil
}

func (s *Store) openPG(ctx context.Context, readOnly bool) error {
	if err := s.r.PingContext(ctx); err != nil {
		return s.pgOpenErr("connect", err)
	}
	version, err := s.pgCheck(ctx)
	if err != nil {
		return err
	}
	want := pgSchemaVersion()
	switch {
	case version > want:
		return &OpenError{Path: s.path, Op: "schema",
			Err:  fmt.Errorf("store schema version %d is newer than this binary supports (%d)", version, want),
			Hint: "upgrade taskhost (every host sharing the database must run a release that knows its schema)"}
	case readOnly && version < want:
		return &OpenError{Path: s.path, Op: "schema",
			Err:  fmt.Errorf("store schema version %d is older than this binary's (%d)", version, want),
			Hint: "start the taskhost daemon once to migrate it, or use the taskhost release that wrote it"}
	case readOnly:
		return nil
	}
	if err := migratePG(ctx, s.w, want); err != nil {
		return s.pgOpenErr("migrate", err)
	}
	if err := s.prepare(ctx); err != nil {
		return s.pgOpenErr("postgres", err)
	}
	return nil
}

// pgCheck returns the database's schema version, refusing a database that
// holds tables but no taskhost schema version: it belongs to another
// application, and migrating into it would mix the two.
func (s *Store) pgCheck(ctx context.Context) (int, error) {
	var versioned bool
	var tables int
	err := s.r.QueryRowContext(ctx, `SELECT to_regclass('`+pgVersionTable+`') IS NOT NULL,
		(SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema())`).Scan(&versioned, &tables)
	if err != nil {
		return 0, s.pgOpenErr("schema", err)
	}
	if !versioned {
		if tables > 0 {
			return 0, &OpenError{Path: s.path, Op: "format",
				Err:  fmt.Errorf("store %s is not a taskhost store (its schema holds %d tables of another application)", s.path, tables),
				Hint: "give taskhost a database (or a search_path schema) of its own"}
		}
		return 0, nil
	}
	var version int
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+pgVersionTable).Scan(&version); err != nil {
		return 0, s.pgOpenErr("schema", err)
	}
	return version, nil
}

// pgOpenErr classifies an error met while opening a PostgreSQL store.
func (s *Store) pgOpenErr(op string, err error) error {
	switch code := pgCode(err); {
	case code == pgInvalidCatalog:
		return &OpenError{Path: s.path, Op: op, Err: fmt.Errorf("store %s: the database does not exist: %w", s.path, err),
			Hint: "create it (createdb) or fix the DSN's database name"}
	case code == pgInvalidPassword || code == pgInvalidAuthorization:
		return &OpenError{Path: s.path, Op: op, Err: fmt.Errorf("store %s: authentication failed: %w", s.path, err),
			Hint: "check the DSN's user and password and the server's pg_hba.conf"}
	case pgUnavailable(err) != "":
		return &OpenError{Path: s.path, Op: op, Err: fmt.Errorf("store %s: cannot reach the PostgreSQL server: %w", s.path, err),
			Hint: "check that the server is running and that the DSN's host and port are right"}
	}
	return &OpenError{Path: s.path, Op: op, Err: fmt.Errorf("store %s: %w", s.path, err)}
}

// describe names a PostgreSQL database for messages: user, host and
// database, never the password.
func describe(cfg *pgx.ConnConfig) string {
	host := cfg.Host
	if !strings.HasPrefix(host, "/") {
		host = fmt.Sprintf("%s:%d", host, cfg.Port)
	}
	return fmt.Sprintf("postgres://%s@%s/%s", cfg.User, host, cfg.Database)
}

func (p PoolOptions) normalize() (PoolOptions, error) {
	if p.MaxOpenConns == 0 {
		p.MaxOpenConns = DefaultMaxOpenConns
	}
	if p.MaxIdleConns == 0 {
		p.MaxIdleConns = min(DefaultMaxIdleConns, p.MaxOpenConns)
	}
	if p.ConnMaxLifetime == 0 {
		p.ConnMaxLifetime = DefaultConnMaxLifetime
	}
	if p.IdleInTxTimeout == 0 {
		p.IdleInTxTimeout = DefaultIdleInTxTimeout
	}
	switch {
	case p.MaxOpenConns < 2:
		// A write transaction holds one connection while a read runs on
		// another (a transition's caller reads the task it changed).
		return p, fmt.Errorf("%w: max_open_conns must be at least 2, not %d", ErrInvalid, p.MaxOpenConns)
	case p.MaxIdleConns < 0 || p.MaxIdleConns > p.MaxOpenConns:
		return p, fmt.Errorf("%w: max_idle_conns must be 0..max_open_conns (%d), not %d", ErrInvalid, p.MaxOpenConns, p.MaxIdleConns)
	case p.ConnMaxLifetime < 0:
		return p, fmt.Errorf("%w: conn_max_lifetime must not be negative, not %s", ErrInvalid, p.ConnMaxLifetime)
	case p.IdleInTxTimeout < 100*time.Millisecond:
		return p, fmt.Errorf("%w: idle_in_tx_timeout must be at least 100ms, not %s", ErrInvalid, p.IdleInTxTimeout)
	}
	return p, nil
}
