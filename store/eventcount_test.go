package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
)

// wantEventsCounted checks that task id's events_stored is the number of
// events the task holds, and returns that number.
func wantEventsCounted(t testing.TB, s *Store, id string) int64 {
	t.Helper()
	var stored, n int64
	err := s.readRow(context.Background(), `SELECT events_stored, (SELECT count(*) FROM events WHERE task_id = $1)
		FROM tasks WHERE id = $1`, id).Scan(&stored, &n)
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	if stored != n {
		t.Fatalf("task %s: events_stored %d, but it holds %d events", id, stored, n)
	}
	return n
}

// seqs are the sequence numbers of evs, in order.
func seqs(evs []Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// evs is n events of type typ.
func evs(typ string, n int) []NewEvent { return slices.Repeat([]NewEvent{{Type: typ}}, n) }

// stepWith runs one step of task "t" (attempt a, run) that stores n >= 1
// events, and returns the next attempt.
func stepWith(t *testing.T, s *Store, run int64, a Attempt, n int64) Attempt {
	t.Helper()
	f := stepFinish(run, a.Number)
	f.Events = evs("step.completed", int(n-1))
	_, next, _, err := s.FinishAndClaim(context.Background(), f, NewEvent{Type: "step.started"})
	if err != nil {
		t.Fatal(err)
	}
	return *next
}

// stepTo runs one step of task "t" whose events bring the task's count to
// exactly total, at least one more than it holds and not past its bound.
func stepTo(t *testing.T, s *Store, run int64, a Attempt, total int64) Attempt {
	t.Helper()
	n := total - wantEventsCounted(t, s, "t")
	if n < 1 {
		t.Fatalf("task t already holds %d events, want to step to %d", total-n, total)
	}
	a = stepWith(t, s, run, a, n)
	if got := wantEventsCounted(t, s, "t"); got != total {
		t.Fatalf("stepped to %d events, want %d", got, total)
	}
	return a
}

// TestEventsCountedOnEveryWrite runs one task through every kind of write
// that stores events — with bursts past a small limit, so that most of them
// trim too — and after each requires its events_stored to equal the events
// it holds, and the log to be within its bound.
func TestEventsCountedOnEveryWrite(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		const limit = 10
		ctx := context.Background()
		s := open(t, func(o *Options) { o.Limits = Limits{EventsPerTask: limit} })
		var task Task
		var a Attempt
		check := func(t *testing.T, what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if n := wantEventsCounted(t, s, "t"); n > limit+eventTrimSlack {
				t.Fatalf("%s: %d events, bound %d+%d", what, n, limit, eventTrimSlack)
			}
		}
		ok := func(_ any, err error) error { return err }
		var err error
		task, err = s.CreateTask(ctx, NewTask{ID: "t", PrincipalID: "p", Executor: "legacy", Spec: []byte(`{}`),
			Limits: defaultBudgets()}, evs("task.created", limit+3)...)
		check(t, "CreateTask past the limit", err)
		task, err = s.StartRun(ctx, "p", "t", StatusPending, evs("task.started", 2)...)
		check(t, "StartRun", err)
		a, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID, evs("step.started", limit+2)...)
		check(t, "ClaimAttempt past the limit", err)
		check(t, "AppendEvents", ok(s.AppendEvents(ctx, "p", "t", task.RunID, evs("tool.called", 4)...)))
		_, _, err = s.AdmitEffect(ctx, NewEffect{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Attempt: a.Number, Seq: 1,
			Kind: EffectModel, Fingerprint: "f"}, evs("model.called", 2)...)
		check(t, "AdmitEffect", err)

		f := stepFinish(task.RunID, a.Number)
		f.Events = evs("step.completed", 2)
		_, next, _, err := s.FinishAndClaim(ctx, f, NewEvent{Type: "step.started"})
		check(t, "FinishAndClaim (fast path)", err)
		a = *next
		f = stepFinish(task.RunID, a.Number)
		f.Status, f.Outcome = AttemptInterrupted, "" // an interrupted attempt takes the general path
		f.Events = evs("step.interrupted", limit)
		_, next, _, err = s.FinishAndClaim(ctx, f, evs("step.started", 2)...)
		check(t, "FinishAndClaim (general path)", err)
		a = *next

		_, _, err = s.RequestApproval(ctx, NewApproval{ID: "ap", PrincipalID: "p", TaskID: "t", RunID: task.RunID, Attempt: a.Number,
			Seq: 2, Tool: "rm", ExpiresAt: time.Now().Add(time.Hour)}, evs("approval.requested", 1)...)
		check(t, "RequestApproval", err)
		_, _, err = s.ResolveApproval(ctx, "p", "ap", ApprovalApproved, evs("approval.resolved", 2)...)
		check(t, "ResolveApproval", err)
		_, err = s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", Events: evs("step.completed", 3)})
		check(t, "FinishAttempt", err)

		_, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID, evs("step.started", 1)...)
		check(t, "ClaimAttempt", err)
		_, err = s.Recover(ctx, 0, func(Task) []NewEvent { return evs("task.interrupted", limit+1) })
		check(t, "Recover", err)
		task, err = s.StartRun(ctx, "p", "t", StatusInterrupted, evs("task.started", 1)...)
		check(t, "StartRun after recovery", err)
		_, err = s.EndRun(ctx, EndRun{PrincipalID: "p", TaskID: "t", RunID: task.RunID, To: StatusInterrupted,
			Reason: ReasonHostShutdown, Events: evs("task.interrupted", 2)})
		check(t, "EndRun", err)
		task, err = s.StartRun(ctx, "p", "t", StatusInterrupted)
		check(t, "StartRun without events", err)
		a, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID)
		check(t, "ClaimAttempt without events", err)
		_, err = s.Cancel(ctx, "p", "t", evs("task.cancelled", 3)...)
		check(t, "Cancel", err)
		check(t, "AbandonAttempt", s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t", Number: a.Number,
			Status: AttemptCancelled, Events: evs("step.abandoned", 7)}))

		if err := s.DeleteTask(ctx, "p", "t"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.readRow(ctx, `SELECT count(*) FROM events WHERE task_id = $1`, "t").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d events (%v) left of a deleted task", n, err)
		}
	})
}

// TestEventTrimBound: a task at exactly its bound — EventsPerTask plus
// eventTrimSlack on the step path, EventsPerTask for every other writer —
// is not trimmed; one event more trims it to exactly the newest
// EventsPerTask, by seq, and the counter follows.
func TestEventTrimBound(t *testing.T) {
	t.Parallel()
	const limit = 10
	tests := []struct {
		name  string
		bound int64
		// write stores n events on task "t" (run, attempt a) and returns
		// the next running attempt.
		write func(t *testing.T, s *Store, run int64, a Attempt, n int64) Attempt
	}{
		{"FinishAndClaim", limit + eventTrimSlack, func(t *testing.T, s *Store, run int64, a Attempt, n int64) Attempt {
			return stepWith(t, s, run, a, n)
		}},
		{"AppendEvents", limit, func(t *testing.T, s *Store, run int64, a Attempt, n int64) Attempt {
			if _, err := s.AppendEvents(context.Background(), "p", "t", run, evs("tool.called", int(n))...); err != nil {
				t.Fatal(err)
			}
			return a
		}},
	}
	forDrivers(t, func(t *testing.T, open opener) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				s := open(t, func(o *Options) { o.Limits = Limits{EventsPerTask: limit} })
				task, a := claimedTask(t, s, "p", "t")
				a = tc.write(t, s, task.RunID, a, tc.bound-wantEventsCounted(t, s, "t"))
				at := allEvents(t, s, "p", "t")
				if n := wantEventsCounted(t, s, "t"); n != tc.bound || len(at) != int(n) {
					t.Fatalf("%d events (%d read) at the bound, want %d: trimmed too early", n, len(at), tc.bound)
				}
				tc.write(t, s, task.RunID, a, 1)
				after := allEvents(t, s, "p", "t")
				if n := wantEventsCounted(t, s, "t"); n != limit {
					t.Fatalf("%d events one past the bound, want the newest %d", n, limit)
				}
				last := after[len(after)-1]
				if last.Seq <= at[len(at)-1].Seq {
					t.Fatalf("the newest event %+v is not the one written last", last)
				}
				if want := append(seqs(at), last.Seq)[len(at)+1-limit:]; !reflect.DeepEqual(seqs(after), want) {
					t.Fatalf("kept events %v, want the newest %v", seqs(after), want)
				}
			})
		}
	})
}

// TestGroupCommitTrimKeepsCounts: in one shared commit, two members whose
// steps trim their tasks' events and one refused between them after its
// task row was counted: the refused member's count is rolled back with its
// savepoint, the others' trims and counts stand.
func TestGroupCommitTrimKeepsCounts(t *testing.T) {
	t.Parallel()
	const limit = 10
	ctx := context.Background()
	commits := new(atomic.Int64)
	s := openTest(t, func(o *Options) {
		o.Limits = Limits{EventsPerTask: limit}
		o.ObserveCommit = func(time.Duration) { commits.Add(1) }
	})
	atBound := func(id string) (Task, Attempt) {
		task, a := claimedTask(t, s, "alice", id)
		f := stepOf(task, a, 16)
		f.Events = evs("step.completed", int(limit+eventTrimSlack-wantEventsCounted(t, s, id)))
		_, next, _, err := s.FinishAndClaim(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if n := wantEventsCounted(t, s, id); n != limit+eventTrimSlack {
			t.Fatalf("%s: %d events, want %d", id, n, limit+eventTrimSlack)
		}
		return task, *next
	}
	tl, al := atBound("lead")
	tb, ab := atBound("b")
	tr, ar := atBound("refused")
	tc, ac := atBound("c")
	before := snap(t, s, "alice", "refused")
	rig := newGroupRig(t, s, commits)

	cl := rig.lead(t, step(ctx, s, stepOf(tl, al, 16)))
	cb := rig.queue(t, 1, step(ctx, s, stepOf(tb, ab, 16)))
	stale := stepOf(tr, ar, 16)
	stale.Number += 5 // the task row is updated (and counted) before the refusal
	cr := rig.queue(t, 2, step(ctx, s, stale))
	cc := rig.queue(t, 3, step(ctx, s, stepOf(tc, ac, 16)))
	rig.release()
	for id, ch := range map[string]<-chan stepResult{"lead": cl, "b": cb, "c": cc} {
		if r := recv(t, ch); r.err != nil {
			t.Fatalf("%s: %v", id, r.err)
		}
		if n := wantEventsCounted(t, s, id); n != limit {
			t.Errorf("%s: %d events after its trim, want %d", id, n, limit)
		}
		if evs := allEvents(t, s, "alice", id); evs[len(evs)-1].Type != "step.started" {
			t.Errorf("%s: the newest event is %+v, not the step's", id, evs[len(evs)-1])
		}
	}
	wantErrIs(t, recv(t, cr).err, ErrNotFound)
	if n := wantEventsCounted(t, s, "refused"); n != limit+eventTrimSlack {
		t.Errorf("refused: %d events, want its %d", n, limit+eventTrimSlack)
	}
	if got := snap(t, s, "alice", "refused"); !reflect.DeepEqual(got, before) {
		t.Errorf("the refused member changed its task:\n got %+v\nwant %+v", got, before)
	}
	if got := rig.groupSizes(); !reflect.DeepEqual(got, []int{1, 3}) {
		t.Errorf("group sizes %v, want [1 3]", got)
	}
}

// oldTasks are the tasks fillOldStore stores, by their number of events:
// none, some, and more than migratedLimit.
var oldTasks = map[string]int{"none": 0, "some": 3, "many": migratedLimit + 5}

// migratedLimit is the EventsPerTask a migrated store is opened with.
const migratedLimit = 10

// fillOldStore writes oldTasks, running in run 1, into a store at a schema
// version before the events counter.
func fillOldStore(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	for id, n := range oldTasks {
		if _, err := db.ExecContext(ctx, `INSERT INTO tasks (id, principal_id, executor, spec, status, run_id,
				steps_limit, tool_calls_limit, model_calls_limit, depth_limit, wall_ms_limit, created_ns, updated_ns)
			VALUES ($1, 'p', 'legacy', $2, 'running', 1, 10, 10, 10, 1, 1000000, 1, 1)`, id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := db.ExecContext(ctx, `INSERT INTO events (task_id, run_id, type, time_ns, payload)
				VALUES ($1, 1, $2, 1, $3)`, id, fmt.Sprint("old", i), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// wantMigratedCounts checks a store migrated from fillOldStore's: each
// task's count is the events it holds, and the next event of the task
// past the limit trims it to the limit.
func wantMigratedCounts(t *testing.T, s *Store) {
	t.Helper()
	for id, n := range oldTasks {
		if got := wantEventsCounted(t, s, id); got != int64(n) {
			t.Errorf("%s: %d events counted after the migration, want %d", id, got, n)
		}
	}
	if _, err := s.AppendEvents(context.Background(), "p", "many", 1, NewEvent{Type: "new"}); err != nil {
		t.Fatal(err)
	}
	evs := allEvents(t, s, "p", "many")
	if n := wantEventsCounted(t, s, "many"); n != migratedLimit || evs[len(evs)-1].Type != "new" {
		t.Fatalf("many: %d events after an append, newest %+v; want the newest %d", n, evs[len(evs)-1], migratedLimit)
	}
}

// TestMigrateCountsEvents: a SQLite store at v5 migrates to counts equal to
// each task's events.
func TestMigrateCountsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := sqliteAtVersion(t, 5)
	fillOldStore(t, db)
	db.Close()
	s, err := Open(ctx, path, Options{Limits: Limits{EventsPerTask: migratedLimit}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantMigratedCounts(t, s)
}

// TestPostgresMigrateCountsEvents: a PostgreSQL store at v2 migrates to
// counts equal to each task's events.
func TestPostgresMigrateCountsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testpg.DSN(t)
	db := openPGDB(t, dsn)
	if err := migratePG(ctx, db, 2); err != nil {
		t.Fatal(err)
	}
	fillOldStore(t, db)
	s, err := OpenPostgres(ctx, dsn, Options{Limits: Limits{EventsPerTask: migratedLimit}}, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantMigratedCounts(t, s)
}

// TestEventTrimSlackDocumented: the bound the package doc and the operator
// docs state is the one the step path keeps.
func TestEventTrimSlackDocumented(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ file, text string }{
		{"doc.go", fmt.Sprintf("holds at most EventsPerTask+%d.", eventTrimSlack)},
		{"../docs/configuration.md", fmt.Sprintf("by up to %d events", eventTrimSlack)},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Skipf("docs not beside the package: %v", err)
		}
		if !strings.Contains(string(b), c.text) {
			t.Errorf("%s does not state the bound %q", c.file, c.text)
		}
	}
}
