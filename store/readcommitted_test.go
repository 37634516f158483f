package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
)

// The races READ COMMITTED opens on PostgreSQL, each run by two hosts (two
// Store handles, as two processes would have) at the same instant, many
// rounds over: of every pair exactly one wins, the loser is refused with
// a typed error, no row is lost or written twice — and no transaction is
// retried, because every path takes the task row's lock first.

// rcRounds is how many times each race is run.
const rcRounds = 40

// pgHosts opens one PostgreSQL database as len(ids) registered hosts on a
// shared clock, counting every retried transaction by SQLSTATE.
func pgHosts(t *testing.T, ids ...string) (*fleetClock, []*Store, *retryCount) {
	t.Helper()
	dsn := testpg.DSN(t)
	clock := &fleetClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	rc := &retryCount{by: map[string]int{}}
	var out []*Store
	for _, id := range ids {
		s, err := OpenPostgres(context.Background(), dsn, Options{Now: clock.Now, HostID: id, ObserveRetry: rc.add}, PoolOptions{})
		if err != nil {
			t.Fatalf("open as %s: %v", id, err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.RegisterHost(context.Background(), "test"); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	t.Cleanup(func() {
		if n := rc.total(); n != 0 {
			t.Errorf("%d transactions retried (%v): every path must take the task row first and never lose a race", n, rc.snapshot())
		}
	})
	return clock, out, rc
}

type retryCount struct {
	mu sync.Mutex
	by map[string]int
}

func (r *retryCount) add(code string) { r.mu.Lock(); r.by[code]++; r.mu.Unlock() }
func (r *retryCount) total() (n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.by {
		n += v
	}
	return n
}
func (r *retryCount) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.by {
		out[k] = v
	}
	return out
}

// race runs a and b at once and returns their errors.
func race(a, b func() error) (errA, errB error) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { <-start; errA = a() })
	wg.Go(func() { <-start; errB = b() })
	close(start)
	wg.Wait()
	return errA, errB
}

func countEvents(t *testing.T, s *Store, id, typ string) int {
	t.Helper()
	n := 0
	for _, e := range allEvents(t, s, "p", id) {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func oneWinner(t *testing.T, round int, what string, errA, errB error) (aWon bool) {
	t.Helper()
	if (errA == nil) == (errB == nil) {
		t.Fatalf("round %d: %s: errors %v and %v, want exactly one winner", round, what, errA, errB)
	}
	loser := errA
	if loser == nil {
		loser = errB
	}
	if !errors.Is(loser, ErrConflict) {
		t.Fatalf("round %d: %s: loser's error %v does not match ErrConflict", round, what, loser)
	}
	return errA == nil
}

// TestPostgresRCFinishRace: two hosts finish the same attempt of the same
// run at once (a duplicated delivery, a host that thinks it still owns the
// run): one outcome is stored, once.
func TestPostgresRCFinishRace(t *testing.T) {
	t.Parallel()
	_, hs, _ := pgHosts(t, "host-a", "host-b")
	ctx := context.Background()
	for i := range rcRounds {
		id := fmt.Sprintf("fin-%03d", i)
		task, att := claimedTask(t, hs[0], "p", id)
		finish := func(s *Store, who string) func() error {
			return func() error {
				_, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: id, RunID: task.RunID, Number: att.Number,
					Status: AttemptCompleted, Outcome: "complete", Summary: who, Result: []byte(`"` + who + `"`),
					TaskTo: StatusCompleted, Events: []NewEvent{{Type: "task.completed"}}})
				return err
			}
		}
		errA, errB := race(finish(hs[0], "a"), finish(hs[1], "b"))
		aWon := oneWinner(t, i, "finish vs finish", errA, errB)
		got := getTask(t, hs[1], "p", id)
		want := map[bool]string{true: `"a"`, false: `"b"`}[aWon]
		if got.Status != StatusCompleted || string(got.Result) != want {
			t.Fatalf("round %d: task %s result %s, want completed with the winner's %s", i, got.Status, got.Result, want)
		}
		if as := listAttempts(t, hs[1], "p", id); len(as) != 1 || as[0].Status != AttemptCompleted {
			t.Fatalf("round %d: attempts %+v, want one completed", i, as)
		}
		if n := countEvents(t, hs[1], id, "task.completed"); n != 1 {
			t.Fatalf("round %d: %d task.completed events, want 1", i, n)
		}
	}
}

// TestPostgresRCClaimRace: two claims of the next attempt of one run at
// once: one attempt row, one step charged.
func TestPostgresRCClaimRace(t *testing.T) {
	t.Parallel()
	_, hs, _ := pgHosts(t, "host-a", "host-b")
	ctx := context.Background()
	for i := range rcRounds {
		id := fmt.Sprintf("claim-%03d", i)
		task := runningTask(t, hs[0], "p", id)
		claim := func(s *Store) func() error {
			return func() error {
				_, _, err := s.ClaimAttempt(ctx, "p", id, task.RunID, NewEvent{Type: "step.started"})
				return err
			}
		}
		errA, errB := race(claim(hs[0]), claim(hs[1]))
		oneWinner(t, i, "claim vs claim", errA, errB)
		if got := getTask(t, hs[1], "p", id); got.Budgets.Steps.Used != 1 {
			t.Fatalf("round %d: %d steps charged, want 1", i, got.Budgets.Steps.Used)
		}
		if as := listAttempts(t, hs[1], "p", id); len(as) != 1 {
			t.Fatalf("round %d: %d attempts, want 1", i, len(as))
		}
		if n := countEvents(t, hs[1], id, "step.started"); n != 1 {
			t.Fatalf("round %d: %d step.started events, want 1", i, n)
		}
	}
}

// TestPostgresRCSweepVersusFinish: a host whose heartbeat lapsed finishes
// its step while another host sweeps it: either the outcome is stored and
// the sweep takes nothing, or the sweep takes the task and the finish is
// fenced — never both, never neither.
func TestPostgresRCSweepVersusFinish(t *testing.T) {
	t.Parallel()
	clock, hs, _ := pgHosts(t, "host-a", "host-b")
	a, b := hs[0], hs[1]
	ctx := context.Background()
	finished, swept := 0, 0
	for i := range rcRounds {
		id := fmt.Sprintf("sweep-%03d", i)
		task, att := claimedTask(t, a, "p", id)
		clock.advance(testLease + time.Second)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		var ids []string
		errFinish, errSweep := race(func() error {
			_, err := a.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: id, RunID: task.RunID, Number: att.Number,
				Status: AttemptCompleted, Outcome: "complete", TaskTo: StatusCompleted, Events: []NewEvent{{Type: "task.completed"}}})
			return err
		}, func() error {
			var err error
			ids, err = b.SweepLostHosts(ctx, testLease, 0, lostEvents)
			return err
		})
		if errSweep != nil {
			t.Fatalf("round %d: sweep: %v", i, errSweep)
		}
		got := getTask(t, b, "p", id)
		as := listAttempts(t, b, "p", id)
		switch {
		case errFinish == nil && len(ids) == 0:
			finished++
			if got.Status != StatusCompleted || len(as) != 1 || as[0].Status != AttemptCompleted {
				t.Fatalf("round %d: finish won, but task %s attempts %+v", i, got.Status, as)
			}
		case errFinish != nil && len(ids) == 1:
			swept++
			if !errors.Is(errFinish, ErrConflict) {
				t.Fatalf("round %d: finish after the sweep: %v, want a refusal matching ErrConflict", i, errFinish)
			}
			if got.Status != StatusInterrupted || got.Reason != ReasonHostLost || len(as) != 1 || as[0].Status != AttemptInterrupted {
				t.Fatalf("round %d: sweep won, but task %s (%s) attempts %+v", i, got.Status, got.Reason, as)
			}
		default:
			t.Fatalf("round %d: finish %v, sweep took %v: want exactly one winner", i, errFinish, ids)
		}
		// The next round's task must be A's only live one; A heartbeats.
		if err := a.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("finish won %d rounds, the sweep %d", finished, swept)
}

// TestPostgresRCCancelVersusReject: a cancel through one host and a
// rejection of the task's pending approval through another, at once: the
// task and its approval end one way, together.
func TestPostgresRCCancelVersusReject(t *testing.T) {
	t.Parallel()
	_, hs, _ := pgHosts(t, "host-a", "host-b")
	ctx := context.Background()
	for i := range rcRounds {
		id := fmt.Sprintf("appr-%03d", i)
		task, att := claimedTask(t, hs[0], "p", id)
		apID := "ap-" + id
		if _, _, err := hs[0].RequestApproval(ctx, NewApproval{ID: apID, PrincipalID: "p", TaskID: id, RunID: task.RunID,
			Attempt: att.Number, Seq: 1, Tool: "shell.run", Prompt: "ok?", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		errCancel, errReject := race(func() error {
			_, err := hs[1].Cancel(ctx, "p", id, NewEvent{Type: "task.cancelled"})
			return err
		}, func() error {
			_, _, err := hs[0].ResolveApproval(ctx, "p", apID, ApprovalRejected, NewEvent{Type: "approval.rejected"})
			return err
		})
		got := getTask(t, hs[1], "p", id)
		ap, err := hs[1].GetApproval(ctx, "p", apID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case errCancel == nil && errReject != nil:
			if got.Status != StatusCancelled || ap.Status != ApprovalCancelled || !errors.Is(errReject, ErrConflict) {
				t.Fatalf("round %d: cancel won, but task %s approval %s, reject %v", i, got.Status, ap.Status, errReject)
			}
		case errReject == nil && errCancel != nil:
			if got.Status != StatusFailed || ap.Status != ApprovalRejected || !errors.Is(errCancel, ErrConflict) {
				t.Fatalf("round %d: reject won, but task %s approval %s, cancel %v", i, got.Status, ap.Status, errCancel)
			}
		default:
			t.Fatalf("round %d: cancel %v, reject %v: want exactly one winner", i, errCancel, errReject)
		}
		if c, r := countEvents(t, hs[1], id, "task.cancelled"), countEvents(t, hs[1], id, "approval.rejected"); c+r != 1 {
			t.Fatalf("round %d: %d cancel and %d reject events, want one in all", i, c, r)
		}
	}
}

// TestPostgresRCEventOrder: many writers append to one task while it
// runs; a watcher that follows the task by "after seq" sees every event,
// each once, in order — events are numbered under the task's lock, so they
// commit in the order of their numbers.
func TestPostgresRCEventOrder(t *testing.T) {
	t.Parallel()
	_, hs, _ := pgHosts(t, "host-a", "host-b")
	ctx := context.Background()
	task := runningTask(t, hs[0], "p", "ev")
	const writers, each = 8, 25
	var done atomic.Bool
	var seen []Event
	watch := make(chan error, 1)
	go func() {
		var after int64
		for {
			last := done.Load()
			page, err := hs[1].Events(ctx, "p", "ev", after, 1000)
			if err != nil {
				watch <- err
				return
			}
			for _, e := range page {
				seen = append(seen, e)
				after = e.Seq
			}
			if last && len(page) == 0 {
				watch <- nil
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		s := hs[w%2]
		wg.Go(func() {
			for range each {
				if _, err := s.AppendEvents(ctx, "p", "ev", task.RunID, NewEvent{Type: "x"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	if err := <-watch; err != nil {
		t.Fatal(err)
	}
	all := allEvents(t, hs[1], "p", "ev")
	if len(seen) != len(all) {
		t.Fatalf("the watcher saw %d events of %d", len(seen), len(all))
	}
	for i := range all {
		if seen[i].Seq != all[i].Seq {
			t.Fatalf("event %d: watcher saw seq %d, store holds %d", i, seen[i].Seq, all[i].Seq)
		}
	}
	if n := countEvents(t, hs[1], "ev", "x"); n != writers*each {
		t.Fatalf("%d events stored, want %d", n, writers*each)
	}
}

// TestPostgresHeartbeatOwnConnection: with every connection of the pool
// held (steps waiting on locks, a slow sweep), the host heartbeat still
// commits at once, on its own connection, and a sweep in progress holding
// its candidates' locks does not delay it either.
func TestPostgresHeartbeatOwnConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := OpenPostgres(ctx, testpg.DSN(t), Options{HostID: "host-a"}, PoolOptions{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.RegisterHost(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	claimedTask(t, s, "p", "t1")
	var held []*sql.Conn
	for range 2 {
		c, err := s.w.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// One of them sits in a transaction that locks the task and reads the
	// host rows, as a sweep does.
	if _, err := held[0].ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := held[0].ExecContext(ctx, `SELECT 1 FROM tasks WHERE id = 't1' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := held[0].ExecContext(ctx, `SELECT count(*) FROM hosts WHERE heartbeat_ns >= 0`); err != nil {
		t.Fatal(err)
	}
	beatCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.HeartbeatHost(beatCtx); err != nil {
		t.Fatalf("heartbeat with the pool full: %v", err)
	}
	held[0].ExecContext(ctx, `ROLLBACK`) //nolint:errcheck
	for _, c := range held {
		c.Close()
	}
}

// TestPostgresWriteSurvivesTerminatedBackends: every session of the
// store's database is ended (pg_terminate_backend: a failover, an
// operator, a server restart) between writes; the next write of each kind
// succeeds at the first call — the store runs a transaction whose
// connection was lost before its COMMIT again on a fresh one, counting the
// retry, where database/sql has not already replaced the connection —
// instead of refusing it as unavailable.
func TestPostgresWriteSurvivesTerminatedBackends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testpg.DSN(t)
	rc := &retryCount{by: map[string]int{}}
	s, err := OpenPostgres(ctx, dsn, Options{HostID: "host-a", ObserveRetry: rc.add}, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.RegisterHost(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	admin := openPGDB(t, os.Getenv(testpg.EnvDSN))
	var db string
	if err := s.r.QueryRowContext(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	terminate := func() {
		t.Helper()
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no session to terminate: the test would prove nothing")
		}
	}
	task, att := claimedTask(t, s, "p", "t")
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"create", func() error {
			_, err := s.CreateTask(ctx, NewTask{ID: "t2", PrincipalID: "p", Executor: "x", Spec: []byte(`{}`), Limits: defaultBudgets()})
			return err
		}},
		{"finish and claim", func() error {
			_, next, _, err := s.FinishAndClaim(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: att.Number,
				Status: AttemptCompleted, Outcome: "continue"}, NewEvent{Type: "step.started"})
			if err == nil {
				att = *next
			}
			return err
		}},
		{"events", func() error { _, err := s.AppendEvents(ctx, "p", "t", task.RunID, NewEvent{Type: "x"}); return err }},
		{"cancel", func() error { _, err := s.Cancel(ctx, "p", "t2"); return err }},
	} {
		terminate()
		if err := step.do(); err != nil {
			t.Fatalf("%s after every backend was terminated: %v", step.name, err)
		}
	}
	// database/sql itself replaces a connection it finds dead before use;
	// the rest are the store's retries.
	t.Logf("store retries by code: %v", rc.snapshot())
}

// TestPostgresRCRetentionRace: two hosts' retention sweeps delete the same
// finished tasks at once: every task is deleted exactly once, by one of
// them, and neither fails because the other got there first.
func TestPostgresRCRetentionRace(t *testing.T) {
	t.Parallel()
	clock, hs, _ := pgHosts(t, "host-a", "host-b")
	ctx := context.Background()
	const n = 30
	for i := range n {
		fullTask(t, hs[0], "p", fmt.Sprintf("old-%02d", i))
	}
	cutoff := clock.Now()
	var got [2][]Deleted
	errA, errB := race(func() error {
		var err error
		got[0], err = hs[0].DeleteFinishedBefore(ctx, cutoff, 0, nil)
		return err
	}, func() error {
		var err error
		got[1], err = hs[1].DeleteFinishedBefore(ctx, cutoff, 0, nil)
		return err
	})
	if errA != nil || errB != nil {
		t.Fatalf("retention sweeps: %v, %v; want both to succeed", errA, errB)
	}
	seen := map[string]int{}
	for _, ds := range got {
		for _, d := range ds {
			seen[d.ID]++
		}
	}
	for i := range n {
		id := fmt.Sprintf("old-%02d", i)
		if seen[id] != 1 {
			t.Errorf("task %s reported deleted %d times, want once", id, seen[id])
		}
		if c := rowCounts(t, hs[1], id)["tasks"]; c != 0 {
			t.Errorf("task %s still has %d rows", id, c)
		}
	}
}

// TestLoseOwnRun: a host ends a run it stopped itself as a sweep would —
// once, and never a run it no longer holds.
func TestLoseOwnRun(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		_, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		task, _ := claimedTask(t, a, "p", "t1")
		ok, err := a.LoseOwnRun(ctx, "t1", task.RunID, "host-a could not reach the store", lostEvents)
		if err != nil || !ok {
			t.Fatalf("LoseOwnRun = %v, %v; want it ended", ok, err)
		}
		got := getTask(t, a, "p", "t1")
		if got.Status != StatusInterrupted || got.Reason != ReasonHostLost || got.Message != "host-a could not reach the store" {
			t.Fatalf("task %s (%s) %q, want interrupted host_lost with the message", got.Status, got.Reason, got.Message)
		}
		if as := listAttempts(t, a, "p", "t1"); as[0].Status != AttemptInterrupted {
			t.Fatalf("attempt %s, want interrupted", as[0].Status)
		}
		before := snap(t, a, "p", "t1")
		if ok, err := a.LoseOwnRun(ctx, "t1", task.RunID, "again", lostEvents); err != nil || ok {
			t.Fatalf("second LoseOwnRun = %v, %v; want nothing done", ok, err)
		}
		// Resumed on B: A's old run, and A itself, hold nothing of it.
		if _, err := b.StartRun(ctx, "p", "t1", StatusInterrupted); err != nil {
			t.Fatal(err)
		}
		moved := snap(t, b, "p", "t1")
		for _, run := range []int64{task.RunID, moved.Task.RunID} {
			if ok, err := a.LoseOwnRun(ctx, "t1", run, "stale", lostEvents); err != nil || ok {
				t.Fatalf("LoseOwnRun of run %d on B = %v, %v; want nothing done", run, ok, err)
			}
		}
		if after := snap(t, b, "p", "t1"); !reflect.DeepEqual(after, moved) || before.Task.RunID == moved.Task.RunID {
			t.Fatalf("a refused LoseOwnRun wrote: %+v, want %+v", after.Task, moved.Task)
		}
	})
}

// TestLoseOwnRunAfterRemoteCancel: a task cancelled through another host
// while its own host could not reach the store leaves no attempt running
// once that host ends the run it stopped: no sweep takes a cancelled task,
// and the fenced runner itself wrote nothing.
func TestLoseOwnRunAfterRemoteCancel(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		_, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		task, _ := claimedTask(t, a, "p", "t1")
		if _, err := b.Cancel(ctx, "p", "t1"); err != nil {
			t.Fatal(err)
		}
		if as := listAttempts(t, a, "p", "t1"); as[0].Status != AttemptRunning {
			t.Fatalf("attempt %s after the cancel, want running (its runner closes it)", as[0].Status)
		}
		ok, err := a.LoseOwnRun(ctx, "t1", task.RunID, "host-a could not reach the store", lostEvents)
		if err != nil || ok {
			t.Fatalf("LoseOwnRun = %v, %v; want the task left as it is", ok, err)
		}
		got := getTask(t, a, "p", "t1")
		if got.Status != StatusCancelled || got.Reason != ReasonUserCancelled {
			t.Fatalf("task %s (%s), want cancelled user_cancelled", got.Status, got.Reason)
		}
		as := listAttempts(t, a, "p", "t1")
		if as[0].Status != AttemptCancelled || as[0].Reason != ReasonUserCancelled || as[0].EndedAt.IsZero() {
			t.Fatalf("attempt %s (%s) ended %v, want cancelled user_cancelled with an end", as[0].Status, as[0].Reason, as[0].EndedAt)
		}
		before := snap(t, a, "p", "t1")
		if ok, err := a.LoseOwnRun(ctx, "t1", task.RunID, "again", lostEvents); err != nil || ok {
			t.Fatalf("second LoseOwnRun = %v, %v; want nothing done", ok, err)
		}
		if after := snap(t, a, "p", "t1"); !reflect.DeepEqual(after, before) {
			t.Fatalf("a second LoseOwnRun wrote: %+v, want %+v", after, before)
		}
	})
}

// TestPostgresReadSurvivesTerminatedBackends: as for writes, every session
// is ended between reads; each read of a task, a listing and events then
// succeeds at the first call (a read holds nothing and runs again on a
// fresh connection), and where the server stays gone it is unavailable,
// never an untyped error the API would call internal.
func TestPostgresReadSurvivesTerminatedBackends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testpg.DSN(t)
	s, err := OpenPostgres(ctx, dsn, Options{HostID: "host-a"}, PoolOptions{MaxIdleConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	admin := openPGDB(t, os.Getenv(testpg.EnvDSN))
	var db string
	if err := s.r.QueryRowContext(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTask(ctx, NewTask{ID: "t", PrincipalID: "p", Executor: "x", Spec: []byte(`{}`), Limits: defaultBudgets()}); err != nil {
		t.Fatal(err)
	}
	for _, read := range []struct {
		name string
		do   func() error
	}{
		{"get", func() error { _, err := s.GetTask(ctx, "p", "t"); return err }},
		{"owner", func() error { _, err := s.TaskOwner(ctx, "t"); return err }},
		{"list", func() error { _, err := s.ListTasks(ctx, "p", ListQuery{}); return err }},
		{"count", func() error { _, err := s.CountTasks(ctx, "p", ListQuery{}); return err }},
	} {
		// Warm the pool so that the read meets a connection that is dead.
		for range 3 {
			if err := read.do(); err != nil {
				t.Fatalf("%s before: %v", read.name, err)
			}
		}
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no session to terminate: the test would prove nothing")
		}
		if err := read.do(); err != nil {
			t.Fatalf("%s after every backend was terminated: %v", read.name, err)
		}
	}
}
