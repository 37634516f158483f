package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is the host's only store: tasks, step attempts and events in one
// SQLite file. All writes go through one connection, so they are serialised
// in-process and each is one IMMEDIATE transaction; reads use a separate pool
// of query-only connections that see the last committed state (WAL).
type Store struct {
	path string    // the SQLite file, or a PostgreSQL database described without its password
	d    dialect   // the engine's differences
	q    engineSQL // the statements written per engine
	w    *sql.DB   // the single writer; nil when opened read-only
	r    *sql.DB   // query-only readers
	now  func() time.Time
	lim  Limits
	// observeCommit, observeRetry and observeFenced are Options', or
	// no-ops.
	observeCommit func(time.Duration)
	observeRetry  func(string)
	observeFenced func()
	// writeFault is Options.WriteFault, or nil.
	writeFault func(committed bool) error
	// hb is the PostgreSQL heartbeat's own one-connection pool (see
	// HeartbeatHost); nil on SQLite, where heartbeats take the writer.
	hb   *sql.DB
	host string // Options.HostID: the lease every run started here carries
	// listenCfg is PostgreSQL's connection config, for the dedicated
	// connection Listen holds; nil on SQLite.
	listenCfg *pgx.ConnConfig

	prepared   map[string]*sql.Stmt // writeQueries on w; read-only after Open
	unprepared atomic.Int64         // write statements run without preparation (should stay 0)
	statements atomic.Int64         // write statements run, for the tests that count a step's
	readStmts  stmtCache            // reader statements, prepared on first use
	// group shares one commit among concurrent steps (group.go); nil on
	// PostgreSQL and read-only stores, where writeGrouped is write.
	group *committer
	// sync makes commits durable at synchronous=FULL (durable.go); nil
	// on PostgreSQL, at NORMAL and on read-only stores.
	sync *walSync
}

// readerConns is the size of the reader pool: enough for the API to list and
// stream while the runner writes, small enough to stay cheap.
const readerConns = 4

// sqliteMagic is the first 16 bytes of every SQLite 3 database file.
const sqliteMagic = "SQLite format 3\x00"

// Open opens (creating if needed, unless opts.ReadOnly) the store at path,
// checks it and migrates it to this binary's schema version. It fails closed
// with an *OpenError on anything doubtful and never changes the bytes of a
// file it refuses.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	opts, err := opts.normalize()
	if err != nil {
		return nil, &OpenError{Path: path, Op: "options", Err: err}
	}
	if err := checkDir(path, opts.ReadOnly); err != nil {
		return nil, err
	}
	created, err := checkFile(path, opts.ReadOnly)
	if err != nil {
		return nil, err
	}
	s := &Store{path: path, d: sqliteDialect{}, q: sqliteSQL(), now: opts.Now, lim: opts.Limits, host: opts.HostID, writeFault: opts.WriteFault}
	s.observe(opts)
	if err := s.open(ctx, opts); err != nil {
		s.Close() //nolint:errcheck // the open error is the one to report
		if created {
			// The file is ours and empty: do not leave a stray store behind.
			os.Remove(path) //nolint:errcheck
		}
		return nil, err
	}
	return s, nil
}

// open opens the store's connections: a read-only store's readers alone;
// otherwise the file checked on a read-only connection first, then the
// one writer (which migrates it) and the readers.
func (s *Store) open(ctx context.Context, opts Options) error {
	if opts.ReadOnly {
		return s.openReaders(ctx, opts, "mode=ro")
	}
	if err := s.probe(ctx, opts); err != nil {
		return err
	}
	if err := s.openWriter(ctx, opts); err != nil {
		return err
	}
	s.group = &committer{}
	return s.openReaders(ctx, opts)
}

// probe checks the file on a read-only connection: nothing may be written
// to a file before it has passed the checks — not even the checkpoint of a
// crashed host's WAL that a read-write connection performs when it closes.
func (s *Store) probe(ctx context.Context, opts Options) error {
	probe, err := sql.Open("sqlite", dsn(s.path, opts, "mode=ro", "_pragma=query_only(1)"))
	if err != nil {
		return s.openErr("sqlite", err)
	}
	err = s.check(ctx, probe, false)
	if cerr := probe.Close(); err == nil && cerr != nil {
		err = s.openErr("sqlite", cerr)
	}
	return err
}

// openWriter opens the one writing connection in WAL mode, migrates the
// file to this binary's schema and prepares the write statements.
func (s *Store) openWriter(ctx context.Context, opts Options) error {
	wopts := opts
	if opts.Synchronous == "FULL" {
		// The commit writes the log; walSync syncs it, outside the
		// writer's lock (durable.go).
		wopts.Synchronous = "NORMAL"
		s.sync = newWALSync(s.path)
	}
	w, err := sql.Open("sqlite", dsn(s.path, wopts, "_txlock=immediate"))
	if err != nil {
		return s.openErr("sqlite", err)
	}
	s.w = w
	// One connection: every write is serialised here, so writers never
	// contend for SQLite's lock inside this process.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		return s.openErr("sqlite", err)
	}
	var mode string
	if err := w.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode); err != nil {
		return s.openErr("sqlite", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return &OpenError{Path: s.path, Op: "sqlite",
			Err:  fmt.Errorf("store file %s cannot use WAL journaling (journal_mode is %s)", s.path, mode),
			Hint: "put the data dir on a local file system"}
	}
	if err := migrate(ctx, w, schemaVersion()); err != nil {
		return s.openErr("migrate", err)
	}
	if s.sync != nil {
		// The migrations committed without a ticket: sync them now.
		s.sync.end(s.sync.begin())
		if err := s.sync.visible(); err != nil {
			return s.openErr("sqlite", err)
		}
	}
	if err := s.prepare(ctx); err != nil {
		return s.openErr("sqlite", err)
	}
	return nil
}

// openReaders opens the pool of query-only reading connections (extra:
// more DSN parameters, "mode=ro" for a read-only store, which checks the
// file through them as it opens).
func (s *Store) openReaders(ctx context.Context, opts Options, extra ...string) error {
	r, err := sql.Open("sqlite", dsn(s.path, opts, append(extra, "_pragma=query_only(1)")...))
	if err != nil {
		return s.openErr("sqlite", err)
	}
	s.r = r
	r.SetMaxOpenConns(readerConns)
	r.SetMaxIdleConns(readerConns)
	if opts.ReadOnly {
		return s.check(ctx, r, true)
	}
	if err := r.PingContext(ctx); err != nil {
		return s.openErr("sqlite", err)
	}
	return nil
}

// dsn builds a modernc DSN for path. The path is escaped because SQLite
// parses "file:" names as URIs: a '?' or '#' in a directory name would
// otherwise cut the path short.
func dsn(path string, opts Options, extra ...string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	q := []string{
		fmt.Sprintf("_pragma=busy_timeout(%d)", opts.BusyTimeout.Milliseconds()),
		"_pragma=foreign_keys(1)",
		// RETURNING buffers its rows in a temporary table: keep it in memory.
		"_pragma=temp_store(MEMORY)",
		"_pragma=synchronous(" + url.QueryEscape(opts.Synchronous) + ")",
	}
	q = append(q, extra...)
	return "file:" + esc + "?" + strings.Join(q, "&")
}

// checkDir refuses a data directory that is missing, not a directory, or (for
// a writable store) has no owner-write bit. The mode bits are checked by hand
// because the host may run as root, for whom the kernel ignores them: a
// directory an operator made read-only must still be treated as read-only.
//
// A writable store's directory must also be the daemon's own: not a
// symlink and owned by the effective uid (see checkOwned).
func checkDir(path string, readOnly bool) error {
	dir := filepath.Dir(path)
	stat := os.Stat
	if !readOnly {
		stat = os.Lstat
	}
	fi, err := stat(dir)
	if err == nil && !readOnly {
		if err := checkOwned(path, "data directory", dir, fi); err != nil {
			return err
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &OpenError{Path: path, Op: "data dir",
			Err:  fmt.Errorf("data directory %s does not exist", dir),
			Hint: "create it (mkdir -p " + dir + ") or choose another data dir"}
	case err != nil:
		return &OpenError{Path: path, Op: "data dir",
			Err:  fmt.Errorf("data directory %s: %w", dir, err),
			Hint: "check the data dir path and its permissions"}
	case !fi.IsDir():
		return &OpenError{Path: path, Op: "data dir",
			Err:  fmt.Errorf("data directory %s is not a directory", dir),
			Hint: "choose a directory as data dir"}
	case !readOnly && fi.Mode().Perm()&0o200 == 0:
		return &OpenError{Path: path, Op: "data dir",
			Err:  fmt.Errorf("data directory %s is not writable (mode %04o)", dir, fi.Mode().Perm()),
			Hint: "make it writable (chmod u+w " + dir + ") or choose another data dir"}
	}
	return nil
}

// checkFile refuses a store file that is not a regular file, is read-only
// (mode bits, see checkDir), or does not start with a SQLite header. A
// missing file is created empty with mode 0600 — the store holds every
// principal's tasks — unless readOnly, where it is an error. created reports
// whether this call created it.
//
// The store file is never followed through a symlink, and a writable
// store's file and its SQLite companions (WAL, shared memory, rollback
// journal) must be regular files of the effective uid: SQLite writes to
// them, and a link or another user's file there would take those writes
// elsewhere or feed the store forged pages.
func checkFile(path string, readOnly bool) (created bool, err error) {
	fi, err := os.Lstat(path)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return false, symlinkErr(path, "store file", path)
	}
	if err == nil && !readOnly {
		if err := checkOwned(path, "store file", path, fi); err != nil {
			return false, err
		}
	}
	if !readOnly {
		if err := checkSideFiles(path); err != nil {
			return false, err
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && readOnly:
		return false, &OpenError{Path: path, Op: "file",
			Err:  fmt.Errorf("store file %s does not exist", path),
			Hint: "check the data dir, or start the taskhost daemon once to create the store"}
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return false, &OpenError{Path: path, Op: "file",
				Err:  fmt.Errorf("cannot create store file %s: %w", path, err),
				Hint: "check the data dir's permissions"}
		}
		return true, f.Close()
	case err != nil:
		return false, &OpenError{Path: path, Op: "file", Err: fmt.Errorf("store file %s: %w", path, err),
			Hint: "check the store file's permissions"}
	case fi.IsDir():
		return false, &OpenError{Path: path, Op: "file",
			Err:  fmt.Errorf("store file %s is a directory", path),
			Hint: "move it aside or choose another data dir"}
	case !fi.Mode().IsRegular():
		return false, &OpenError{Path: path, Op: "file",
			Err:  fmt.Errorf("store file %s is not a regular file (%s)", path, fi.Mode().Type()),
			Hint: "move it aside or choose another data dir"}
	case !readOnly && fi.Mode().Perm()&0o200 == 0:
		return false, &OpenError{Path: path, Op: "read-only",
			Err: &sentinelErr{msg: fmt.Sprintf("store file %s is read-only (mode %04o)", path, fi.Mode().Perm()),
				is: ErrReadOnly},
			Hint: "make it writable (chmod u+w " + path + ") to run the daemon, " +
				"or use `taskhost inspect` to read it"}
	}
	if fi.Size() == 0 {
		if readOnly {
			return false, &OpenError{Path: path, Op: "format",
				Err:  fmt.Errorf("store file %s is empty", path),
				Hint: "start the taskhost daemon once to create the store"}
		}
		return false, nil // a new, empty store; migrations will fill it
	}
	return false, checkHeader(path)
}

// checkSideFiles checks the store file's WAL, shared-memory and journal
// files, where they exist: regular files of the daemon's.
func checkSideFiles(path string) error {
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		side := path + suffix
		sfi, err := os.Lstat(side)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = checkOwned(path, "store file", side, sfi)
		}
		if err == nil && !sfi.Mode().IsRegular() {
			err = &OpenError{Path: path, Op: "file",
				Err:  fmt.Errorf("store file %s is not a regular file (%s)", side, sfi.Mode().Type()),
				Hint: "move it aside"}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkHeader refuses a non-empty store file that does not start with a
// SQLite header. A header is 100 bytes; anything shorter, or not starting
// with the magic string, is not a database at all. Checking it here keeps
// SQLite from ever opening (and possibly writing to) such a file.
func checkHeader(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return &OpenError{Path: path, Op: "file", Err: fmt.Errorf("store file %s: %w", path, err),
			Hint: "check the store file's permissions"}
	}
	defer f.Close()
	hdr := make([]byte, 100)
	if _, err := io.ReadFull(f, hdr); err != nil || string(hdr[:len(sqliteMagic)]) != sqliteMagic {
		return notAStore(path, "no SQLite header")
	}
	return nil
}

// checkOwned refuses entry (the store's directory, its file or a companion
// file of it, as fi from Lstat) if it is a symlink or is not owned by the
// process's effective uid.
func checkOwned(path, what, entry string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return symlinkErr(path, what, entry)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return &OpenError{Path: path, Op: "file", Err: fmt.Errorf("%s %s has no owner information", what, entry),
			Hint: "put the data dir on a local POSIX file system"}
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return &OpenError{Path: path, Op: "file",
			Err:  fmt.Errorf("%s %s is owned by uid %d, not by this process's uid %d: refusing", what, entry, st.Uid, euid),
			Hint: fmt.Sprintf("run taskhost as uid %d, or use a data dir created by uid %d", st.Uid, euid)}
	}
	return nil
}

// symlinkErr refuses entry, a symlink: what names it for the operator.
func symlinkErr(path, what, entry string) error {
	target, err := os.Readlink(entry)
	if err != nil {
		target = "(unreadable)"
	}
	return &OpenError{Path: path, Op: "file",
		Err:  fmt.Errorf("%s %s is a symlink to %s: refusing", what, entry, target),
		Hint: "remove the link and use the real path instead (the store follows no link)"}
}

func notAStore(path, why string) error {
	return &OpenError{Path: path, Op: "format",
		Err:  fmt.Errorf("store file %s is not a valid taskhost store (%s)", path, why),
		Hint: "restore it from a backup, or move it aside to start with an empty store"}
}

// check runs, before anything is written, the integrity check and the schema
// version checks. exact demands the file be at this binary's version (a
// read-only open cannot migrate).
func (s *Store) check(ctx context.Context, db *sql.DB, exact bool) error {
	if err := db.PingContext(ctx); err != nil {
		return s.openErr("sqlite", err)
	}
	problems, err := quickCheck(ctx, db)
	if err != nil {
		return s.openErr("integrity", err)
	}
	if len(problems) > 0 {
		return integrityErr(s.path, strings.Join(problems, "; "))
	}

	var version, appID, objects int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return s.openErr("schema", err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA application_id`).Scan(&appID); err != nil {
		return s.openErr("schema", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&objects); err != nil {
		return s.openErr("schema", err)
	}
	// A file with tables but without our application id (or a foreign id)
	// belongs to some other program: migrating into it would corrupt it.
	if (appID != 0 && appID != applicationID) || (appID == 0 && objects > 0) {
		return notAStore(s.path, "it is a SQLite database of another application")
	}
	want := schemaVersion()
	switch {
	case version > want:
		return &OpenError{Path: s.path, Op: "schema",
			Err:  fmt.Errorf("store schema version %d is newer than this binary supports (%d)", version, want),
			Hint: "upgrade taskhost"}
	case exact && version < want:
		return &OpenError{Path: s.path, Op: "schema",
			Err:  fmt.Errorf("store schema version %d is older than this binary's (%d)", version, want),
			Hint: "start the taskhost daemon once to migrate it, or use the taskhost release that wrote it"}
	}
	return nil
}

// quickCheck runs PRAGMA quick_check and returns what it reports, if not
// "ok": at most a few problems, each cut short, enough to diagnose.
func quickCheck(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var out string
		if err := rows.Scan(&out); err != nil {
			return nil, err
		}
		if out == "ok" {
			continue
		}
		bad := len(problems)
		for _, line := range strings.Split(out, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "***") {
				continue // "*** in database main ***" only says which schema
			}
			if len(problems) < 5 {
				if len(line) > 200 {
					line = line[:200] + "..."
				}
				problems = append(problems, line)
			}
		}
		if len(problems) == bad && bad < 5 {
			problems = append(problems, "not ok") // nothing but headers: still not ok
		}
	}
	return problems, rows.Err()
}

func integrityErr(path, problems string) error {
	return &OpenError{Path: path, Op: "integrity",
		Err:  fmt.Errorf("store file %s failed its integrity check (%s)", path, problems),
		Hint: "restore it from a backup, or move it aside to start with an empty store"}
}

// openErr classifies a SQLite error met while opening.
func (s *Store) openErr(op string, err error) error {
	switch sqliteCode(err) {
	case sqliteNotADB:
		return notAStore(s.path, err.Error())
	case sqliteCorrupt:
		return integrityErr(s.path, err.Error())
	case sqliteReadOnly:
		return &OpenError{Path: s.path, Op: "read-only",
			Err:  &sentinelErr{msg: fmt.Sprintf("store file %s is read-only: %v", s.path, err), is: ErrReadOnly},
			Hint: "make the file and its data dir writable, or use `taskhost inspect` to read it"}
	case sqliteCantOpen:
		return &OpenError{Path: s.path, Op: op, Err: fmt.Errorf("cannot open store file %s: %w", s.path, err),
			Hint: "check that the file and its data dir exist and are accessible"}
	}
	return &OpenError{Path: s.path, Op: op, Err: fmt.Errorf("store file %s: %w", s.path, err)}
}

// Close closes the store's connections. In-flight transactions are rolled
// back by SQLite; nothing half-written survives.
func (s *Store) Close() error {
	errs := []error{s.readStmts.close()}
	for _, st := range s.prepared {
		errs = append(errs, st.Close())
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil && s.w != s.r {
		errs = append(errs, s.w.Close())
	}
	if s.hb != nil {
		errs = append(errs, s.hb.Close())
	}
	return errors.Join(errs...)
}

// observe sets the store's observers from opts, no-ops for those unset.
func (s *Store) observe(opts Options) {
	s.observeCommit, s.observeRetry, s.observeFenced = opts.ObserveCommit, opts.ObserveRetry, opts.ObserveFenced
	if s.observeCommit == nil {
		s.observeCommit = func(time.Duration) {}
	}
	if s.observeRetry == nil {
		s.observeRetry = func(string) {}
	}
	if s.observeFenced == nil {
		s.observeFenced = func() {}
	}
}

// PoolStats are the statistics of the connection pool writes take their
// connections from (on SQLite, the single writer's), for the daemon's
// metrics: connections in use, and how often and how long a caller waited
// for one.
func (s *Store) PoolStats() sql.DBStats {
	if s.w != nil {
		return s.w.Stats()
	}
	return s.r.Stats()
}

// Path is the store file's path as given to Open.
func (s *Store) Path() string { return s.path }

// Limits returns the store's limits, defaults filled in.
func (s *Store) Limits() Limits { return s.lim }
