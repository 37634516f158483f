package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskhost/taskhost/internal/testpg"
)

func TestCleanText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain ünïcode ✓", "plain ünïcode ✓"},
		{"nul\x00byte", "nul byte"},
		{"bad\xffbyte", "bad?byte"},
		{"cut \xe2\x9c", "cut ??"},                                // a sequence cut short: one '?' a byte
		{strings.Repeat("\xff", 4096), strings.Repeat("?", 4096)}, // at a limit, stays at it
	}
	for _, tc := range tests {
		got := cleanText(tc.in)
		if got != tc.want || len(got) != len(tc.in) {
			t.Errorf("cleanText(%q) = %q (len %d), want %q (len %d)", tc.in, got, len(got), tc.want, len(tc.in))
		}
	}
}

// TestPostgresKeepsBadTextWithinLimit stores a stderr tail at its limit
// full of bytes PostgreSQL's text refuses: the step's outcome is recorded,
// cleaned, at the same length. One byte past the limit is refused first.
func TestPostgresKeepsBadTextWithinLimit(t *testing.T) {
	t.Parallel()
	s := openPostgres(t)
	ctx := context.Background()
	task, a := claimedTask(t, s, "p", "t")
	tail := strings.Repeat("\x00\xff", s.lim.StderrTail/2)
	f := FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
		Status: AttemptFailed, StderrTail: tail + "x", TaskTo: StatusFailed, TaskReason: ReasonExecutorCrashed}
	var le *LimitError
	if _, err := s.FinishAttempt(ctx, f); !errors.As(err, &le) {
		t.Fatalf("tail past the limit: %v, want *LimitError", err)
	}
	f.StderrTail = tail
	if _, err := s.FinishAttempt(ctx, f); err != nil {
		t.Fatalf("tail at the limit: %v", err)
	}
	got := listAttempts(t, s, "p", "t")[0].StderrTail
	if got != strings.Repeat(" ?", s.lim.StderrTail/2) {
		t.Fatalf("stored tail = %q...", got[:16])
	}
}

// TestPostgresTwoHostsRace races the same compare-and-set from two stores
// on one database — two hosts resuming one interrupted task, many times:
// exactly one resume wins, the loser gets a *TransitionError, and the run
// advances once.
func TestPostgresTwoHostsRace(t *testing.T) {
	t.Parallel()
	dsn := testpg.DSN(t)
	ctx := context.Background()
	a, b := openPGStore(t, dsn), openPGStore(t, dsn)
	const rounds = 100
	for i := range rounds {
		id := fmt.Sprintf("race-%03d", i)
		runningTask(t, a, "p", id)
		if _, err := a.Transition(ctx, Transition{PrincipalID: "p", TaskID: id, From: []Status{StatusRunning}, To: StatusInterrupted, Reason: ReasonHostRestart}); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for j, s := range []*Store{a, b} {
			wg.Go(func() {
				<-start
				_, errs[j] = s.StartRun(ctx, "p", id, StatusInterrupted, NewEvent{Type: "task.resumed"})
			})
		}
		close(start)
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: errors %v and %v: want exactly one winner", i, errs[0], errs[1])
		}
		loser := errs[0]
		if loser == nil {
			loser = errs[1]
		}
		var te *TransitionError
		if !errors.As(loser, &te) || te.Current != StatusRunning {
			t.Fatalf("round %d: loser %v, want *TransitionError with current running", i, loser)
		}
		if got := getTask(t, b, "p", id); got.RunID != 2 || got.Status != StatusRunning {
			t.Fatalf("round %d: run %d status %s, want run 2 running", i, got.RunID, got.Status)
		}
		resumed := 0
		for _, e := range allEvents(t, a, "p", id) {
			if e.Type == "task.resumed" {
				resumed++
			}
		}
		if resumed != 1 {
			t.Fatalf("round %d: %d resume events, want 1", i, resumed)
		}
	}
}

// TestPostgresMigrations migrates a database from empty and from every
// earlier PostgreSQL version to the latest, lets two hosts open a new
// database at once, and refuses a newer schema and another application's
// tables without touching them.
func TestPostgresMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	latest := pgSchemaVersion()
	version := func(t *testing.T, s *Store) (max, rows int) {
		t.Helper()
		if err := s.r.QueryRowContext(ctx, `SELECT max(version), count(*) FROM `+pgVersionTable).Scan(&max, &rows); err != nil {
			t.Fatal(err)
		}
		return max, rows
	}
	for from := 0; from <= latest; from++ {
		t.Run(fmt.Sprintf("from v%d", from), func(t *testing.T) {
			dsn := testpg.DSN(t)
			if from > 0 {
				db := openPGDB(t, dsn)
				if err := migratePG(ctx, db, from); err != nil {
					t.Fatal(err)
				}
			}
			s, err := OpenPostgres(ctx, dsn, Options{}, PoolOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if v, n := version(t, s); v != latest || n != latest {
				t.Fatalf("version %d with %d rows, want %d and %d", v, n, latest, latest)
			}
			runningTask(t, s, "p", "t") // the schema works
		})
	}
	t.Run("two hosts at once", func(t *testing.T) {
		dsn := testpg.DSN(t)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				s, err := OpenPostgres(ctx, dsn, Options{}, PoolOptions{})
				if err == nil {
					err = s.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		s := openPGStore(t, dsn)
		if v, n := version(t, s); v != latest || n != latest {
			t.Fatalf("version %d with %d rows after concurrent opens, want %d once each", v, n, latest)
		}
	})
	t.Run("newer schema", func(t *testing.T) {
		dsn := testpg.DSN(t)
		if s, err := OpenPostgres(ctx, dsn, Options{}, PoolOptions{}); err != nil {
			t.Fatal(err)
		} else {
			s.Close()
		}
		db := openPGDB(t, dsn)
		if _, err := db.ExecContext(ctx, `INSERT INTO `+pgVersionTable+` VALUES ($1, 'from the future', 0)`, latest+1); err != nil {
			t.Fatal(err)
		}
		_, err := OpenPostgres(ctx, dsn, Options{}, PoolOptions{})
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Op != "schema" || !strings.Contains(err.Error(), "newer than this binary") {
			t.Fatalf("err = %v, want a schema *OpenError", err)
		}
	})
	t.Run("another application", func(t *testing.T) {
		dsn := testpg.DSN(t)
		db := openPGDB(t, dsn)
		if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (id INTEGER)`); err != nil {
			t.Fatal(err)
		}
		_, err := OpenPostgres(ctx, dsn, Options{}, PoolOptions{})
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Op != "format" || !strings.Contains(err.Error(), "not a taskhost store") {
			t.Fatalf("err = %v, want a format *OpenError", err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("the refused database now has %d tables (%v), want its 1", n, err)
		}
	})
	t.Run("read-only at an older version", func(t *testing.T) {
		dsn := testpg.DSN(t)
		_, err := OpenPostgres(ctx, dsn, Options{ReadOnly: true}, PoolOptions{})
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Op != "schema" {
			t.Fatalf("read-only open of an empty database: %v, want a schema *OpenError", err)
		}
	})
}

// TestPostgresOpenErrors checks that a DSN that does not parse, a server
// that is not there, a missing database and bad pool bounds are each an
// *OpenError that says what to do and never repeats a password.
func TestPostgresOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		dsn  string
		pool PoolOptions
		op   string
		want string
	}{
		{"unparsable", "postgres://u:s3cret@host:notaport/db", PoolOptions{}, "dsn", "does not parse"},
		{"no server", "host=" + t.TempDir() + " user=u password=s3cret dbname=db connect_timeout=2", PoolOptions{}, "connect", "cannot reach"},
		{"one connection", "host=/nonexistent", PoolOptions{MaxOpenConns: 1}, "options", "max_open_conns must be at least 2"},
		{"idle past open", "host=/nonexistent", PoolOptions{MaxOpenConns: 2, MaxIdleConns: 3}, "options", "max_idle_conns"},
	}
	if missing, err := testpg.WithDatabase(testpg.DSN(t), "taskhost_missing"); err == nil {
		tests = append(tests, struct {
			name string
			dsn  string
			pool PoolOptions
			op   string
			want string
		}{"no database", missing, PoolOptions{}, "connect", "does not exist"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenPostgres(ctx, tc.dsn, Options{}, tc.pool)
			var oe *OpenError
			if !errors.As(err, &oe) || oe.Op != tc.op || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an *OpenError (%s) saying %q", err, tc.op, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error repeats the password: %v", err)
			}
		})
	}
}

// TestPostgresErrorClasses checks how PostgreSQL's failures become the
// store's typed errors, which the runner branches on.
func TestPostgresErrorClasses(t *testing.T) {
	t.Parallel()
	d := pgDialect{}
	tests := []struct {
		code       string
		class      string // "" when not unavailable
		readOnly   bool
		retryable  bool
		constraint bool
	}{
		{code: "53100", class: "disk full"},
		{code: "57P01", class: "server unavailable"},
		{code: "57P03", class: "server unavailable"},
		{code: "08006", class: "server unavailable"},
		{code: "53300", class: "server overloaded"},
		{code: "40001", class: "busy", retryable: true},
		{code: "40P01", class: "busy", retryable: true},
		{code: "25006", readOnly: true},
		{code: "23505", constraint: true},
		{code: "23514", constraint: true},
		{code: "42601"},
	}
	for _, tc := range tests {
		err := fmt.Errorf("exec: %w", &pgconn.PgError{Code: tc.code, Message: "m"})
		got := d.classify("db", err)
		var ue *UnavailableError
		switch {
		case tc.class != "":
			if !errors.As(got, &ue) || ue.Class != tc.class || !errors.Is(got, ErrUnavailable) {
				t.Errorf("%s: %v, want *UnavailableError %q", tc.code, got, tc.class)
			}
		case tc.readOnly:
			if !errors.Is(got, ErrReadOnly) {
				t.Errorf("%s: %v, want ErrReadOnly", tc.code, got)
			}
		default:
			if got != err {
				t.Errorf("%s: %v, want the error unchanged", tc.code, got)
			}
		}
		if d.retryable(err) != tc.retryable || d.constraint(err) != tc.constraint {
			t.Errorf("%s: retryable %v constraint %v, want %v %v", tc.code, d.retryable(err), d.constraint(err), tc.retryable, tc.constraint)
		}
	}
	if got := d.classify("db", context.Canceled); got != context.Canceled {
		t.Errorf("a cancelled context became %v", got)
	}
}

// openPGDB is a plain connection pool on dsn, for setting a database up
// behind the store's back.
func openPGDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openPGStore opens the store in dsn and closes it at the end of the test.
func openPGStore(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := OpenPostgres(context.Background(), dsn, Options{}, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPostgresBackupRefused(t *testing.T) {
	t.Parallel()
	s := openPostgres(t)
	err := s.Backup(context.Background(), t.TempDir()+"/copy.db")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "pg_dump") {
		t.Fatalf("Backup: %v, want ErrInvalid pointing at pg_dump", err)
	}
}

// TestPostgresQueryPlans is TestQueryPlans on PostgreSQL: with sequential
// scans priced out, a statement the runner issues on every step (or a
// listing) that still plans one has no index to use, and would scan a
// table that grows with the store's history. Generic plans, so that no
// parameter value is folded into the plan.
func TestPostgresQueryPlans(t *testing.T) {
	t.Parallel()
	s := openPostgres(t)
	ctx := context.Background()
	conn, err := s.r.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, set := range []string{`SET enable_seqscan = off`, `SET plan_cache_mode = force_generic_plan`} {
		if _, err := conn.ExecContext(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	queries := append(writeQueries(pgSQL()), qTaskExists, qEvents,
		`SELECT `+taskListCols+` FROM tasks WHERE principal_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		`SELECT `+taskListCols+` FROM tasks WHERE principal_id = $1 AND seq > $2 AND status IN ($3, $4) ORDER BY seq LIMIT $5`,
		`SELECT `+attemptCols+` FROM attempts WHERE task_id = $1 AND EXISTS (SELECT 1 FROM tasks WHERE id = $1 AND principal_id = $2) ORDER BY number`,
		(pgDialect{}).lockTask(), qLiveTrees, qTreeOf, qLockTree+(pgDialect{}).forUpdate("tasks", false),
	)
	for i, q := range queries {
		name := fmt.Sprintf("q%d", i)
		if _, err := conn.ExecContext(ctx, `PREPARE `+name+` AS `+q); err != nil {
			t.Fatalf("prepare %s: %v", q, err)
		}
		nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params(q)), ", ")
		explain := `EXPLAIN EXECUTE ` + name
		if nulls != "" {
			explain += `(` + nulls + `)`
		}
		rows, err := conn.QueryContext(ctx, explain)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		if joined := strings.Join(plan, "\n"); strings.Contains(joined, "Seq Scan") {
			t.Errorf("a full scan in\n%s\nplan:\n%s", q, joined)
		}
	}
}

// TestPostgresWatcherMissesNoEvent appends events to one task from two
// stores (two hosts) at once while a watcher polls with its "after seq"
// cursor: the watcher sees every event, because a task's events commit in
// the order of their numbers.
func TestPostgresWatcherMissesNoEvent(t *testing.T) {
	t.Parallel()
	dsn := testpg.DSN(t)
	ctx := context.Background()
	a, b := openPGStore(t, dsn), openPGStore(t, dsn)
	task := runningTask(t, a, "p", "t")
	const each = 150
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*Store{a, b} {
		wg.Go(func() {
			for j := range each {
				if _, err := s.AppendEvents(ctx, "p", "t", task.RunID, NewEvent{Type: fmt.Sprintf("w%d.%d", i, j)}); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	var seen []int64
	var after int64
	poll := func() {
		page, err := b.Events(ctx, "p", "t", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			seen = append(seen, e.Seq)
			after = e.Seq
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		poll()
	}
	poll()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var all []int64
	for _, e := range allEvents(t, a, "p", "t") {
		all = append(all, e.Seq)
	}
	if len(all) != 2*each+2 || !slices.Equal(seen, all) {
		t.Fatalf("the watcher saw %d events, the store holds %d (want %d): a cursor skipped some", len(seen), len(all), 2*each+2)
	}
}

func TestPostgresBindKeepsCallerArgs(t *testing.T) {
	t.Parallel()
	args := []any{"ok", "nul\x00", int64(7), []byte("\x00")}
	got := (pgDialect{}).bind(args)
	if args[1] != "nul\x00" {
		t.Fatalf("bind changed the caller's slice: %q", args[1])
	}
	if got[0] != "ok" || got[1] != "nul " || got[2] != int64(7) || string(got[3].([]byte)) != "\x00" {
		t.Fatalf("bind = %q, want only the string cleaned (bytes go to BYTEA as they are)", got)
	}
}

// TestPostgresServerDropsConnections has the server end every connection
// of the store (as a restart or a failover does): each write that meets a
// dead connection is an *UnavailableError, which the runner retries —
// never another error, which would fail the task — and writes succeed
// again on new connections.
func TestPostgresServerDropsConnections(t *testing.T) {
	t.Parallel()
	dsn := testpg.DSN(t)
	ctx := context.Background()
	s := openPGStore(t, dsn)
	task := runningTask(t, s, "p", "t")
	admin := openPGDB(t, os.Getenv(testpg.EnvDSN))
	var db string
	if err := s.r.QueryRowContext(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		var killed int
		if err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		ok := false
		for try := range 20 {
			err := s.Heartbeat(ctx, "p", "t", task.RunID, int64(round*100+try))
			if err == nil {
				ok = true
				break
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("round %d (%d connections ended), try %d: %v, want ErrUnavailable", round, killed, try, err)
			}
			t.Logf("round %d try %d: %v", round, try, err)
		}
		if !ok {
			t.Fatalf("round %d: no write succeeded on new connections", round)
		}
	}
}

// countingConn counts the writes a client makes on a connection: pgx
// sends what it has queued in one write and then waits for the server,
// so each write begins one round trip.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestPostgresStepRoundTrips: a step — its outcome, the next attempt's
// claim, their events — is one round trip to the server (pgStep), at
// most 3; and it stores what the general path stores.
func TestPostgresStepRoundTrips(t *testing.T) {
	t.Parallel()
	var writes atomic.Int64
	s := openPostgres(t, func(o *Options) {
		o.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{c, &writes}, nil
		}
	})
	ctx := context.Background()
	task, a := claimedTask(t, s, "p", "t")
	for i := range 3 { // the first prepares the statements on its connection
		before := writes.Load()
		f := stepOf(task, a, 1024)
		_, next, _, err := s.FinishAndClaim(ctx, f, NewEvent{Type: "step.started"})
		if err != nil || next == nil {
			t.Fatalf("step %d: next %v, %v", i, next, err)
		}
		a = *next
		if n := writes.Load() - before; i > 0 && n > 3 {
			t.Errorf("step %d took %d round trips, want at most 3", i, n)
		} else if i > 0 {
			t.Logf("step %d: %d round trips", i, n)
		}
	}
	got := getTask(t, s, "p", "t")
	if got.Budgets.Steps.Used != 4 || got.CheckpointAttempt != 3 {
		t.Errorf("after 3 steps: %d steps used, checkpoint of attempt %d; want 4 and 3", got.Budgets.Steps.Used, got.CheckpointAttempt)
	}
	as := listAttempts(t, s, "p", "t")
	if len(as) != 4 || as[2].Status != AttemptCompleted || as[2].Summary != "did a step" || as[3].Status != AttemptRunning {
		t.Errorf("attempts %+v", as)
	}
	evs := allEvents(t, s, "p", "t")
	if n := len(evs); n < 2 || evs[n-2].Type != "step.completed" || evs[n-1].Type != "step.started" || evs[n-2].Seq >= evs[n-1].Seq {
		t.Errorf("events %+v do not end with the step's, in order", evs)
	}
	if n := wantEventsCounted(t, s, "t"); n != int64(len(evs)) {
		t.Errorf("%d events counted, %d stored", n, len(evs))
	}
}
