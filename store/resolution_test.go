package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testpg"
)

// toolEffect admits tool effect (attempt, seq) with fingerprint fp and key,
// and takes it to status.
func toolEffect(t *testing.T, s *Store, task Task, attempt, seq int64, fp, key string, to EffectStatus, result []byte) {
	t.Helper()
	ctx := context.Background()
	e := NewEffect{PrincipalID: task.PrincipalID, TaskID: task.ID, RunID: task.RunID, Attempt: attempt, Seq: seq,
		Kind: EffectTool, Fingerprint: fp, IdempotencyKey: key}
	if _, _, err := s.AdmitEffect(ctx, e); err != nil {
		t.Fatal(err)
	}
	m := MarkEffect{PrincipalID: task.PrincipalID, TaskID: task.ID, Attempt: attempt, Seq: seq, From: EffectAdmitted, To: EffectDispatching}
	if _, err := s.MarkEffect(ctx, m); err != nil {
		t.Fatal(err)
	}
	if to == EffectDispatching {
		return
	}
	m.From, m.To, m.Result = EffectDispatching, to, result
	if _, err := s.MarkEffect(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// gated is what the gate finds for a call with (fp, key) in attempt.
func gated(t *testing.T, s *Store, task Task, attempt int64, fp, key string) []Effect {
	t.Helper()
	effs, err := s.UnsettledEffects(context.Background(), task.PrincipalID, task.ID, attempt, fp, key)
	if err != nil {
		t.Fatal(err)
	}
	return effs
}

func finishThenClaim(t *testing.T, s *Store, task Task, number int64) Attempt {
	t.Helper()
	_, next, _, err := s.FinishAndClaim(context.Background(), FinishAttempt{PrincipalID: task.PrincipalID, TaskID: task.ID,
		RunID: task.RunID, Number: number, Status: AttemptCompleted, Outcome: "continue"})
	if err != nil || next == nil {
		t.Fatalf("finish attempt %d and claim the next: %v", number, err)
	}
	return *next
}

// An effect left indeterminate is refused by fingerprint or by its key in
// every later attempt — after a completed one too — and in a later run,
// until it is resolved; a resolution is a compare-and-set with its event.
func TestUnsettledEffectOutlivesAttemptsAndRuns(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a1 := claimedTask(t, s, "alice", "t1")
		toolEffect(t, s, task, a1.Number, 1, "f", "k", EffectDispatching, nil)
		if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "alice", TaskID: "t1", Number: a1.Number, Status: AttemptInterrupted, Reason: ReasonExecutorCrashed}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.SettleEffects(ctx, "alice", "t1"); err != nil || n != 1 {
			t.Fatalf("settle: %d, %v", n, err)
		}
		a2, _, err := s.ClaimAttempt(ctx, "alice", "t1", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			fp, key string
			want    int
		}{{"f", "", 1}, {"other", "k", 1}, {"f", "k", 1}, {"other", "", 0}, {"other", "k2", 0}} {
			if got := gated(t, s, task, a2.Number, c.fp, c.key); len(got) != c.want {
				t.Errorf("attempt 2, call (%q, %q): gate found %+v, want %d", c.fp, c.key, got, c.want)
			}
		}
		a3 := finishThenClaim(t, s, task, a2.Number)
		if got := gated(t, s, task, a3.Number, "f", ""); len(got) != 1 || got[0].Attempt != 1 || got[0].Status != EffectIndeterminate {
			t.Fatalf("attempt 3, after a completed attempt: gate found %+v, want attempt 1's effect", got)
		}
		// A later run.
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "alice", TaskID: "t1", RunID: task.RunID, Number: a3.Number,
			Status: AttemptInterrupted, Reason: ReasonHostShutdown, TaskTo: StatusInterrupted, TaskReason: ReasonHostShutdown}); err != nil {
			t.Fatal(err)
		}
		task, err = s.StartRun(ctx, "alice", "t1", StatusInterrupted)
		if err != nil {
			t.Fatal(err)
		}
		a4, _, err := s.ClaimAttempt(ctx, "alice", "t1", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if got := gated(t, s, task, a4.Number, "f", ""); len(got) != 1 {
			t.Fatalf("a later run: gate found %+v, want attempt 1's effect", got)
		}
		if ind, err := s.IndeterminateEffects(ctx, "alice", "t1"); err != nil || len(ind) != 1 || ind[0].Attempt != 1 {
			t.Fatalf("a later run is told %+v, %v; want attempt 1's effect", ind, err)
		}

		before := len(allEvents(t, s, "alice", "t1"))
		r := ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: 1, Seq: 1, To: ResolutionAbandoned, By: ResolvedByExecutor}
		got, err := s.ResolveEffect(ctx, r, NewEvent{Type: "effect.resolved"})
		if err != nil || got.Resolution != ResolutionAbandoned || got.ResolvedBy != ResolvedByExecutor || got.ResolvedAt.IsZero() {
			t.Fatalf("abandon: %+v, %v", got, err)
		}
		if n := len(allEvents(t, s, "alice", "t1")); n != before+1 {
			t.Errorf("%d events after the resolution, want %d", n, before+1)
		}
		if got := gated(t, s, task, a4.Number, "f", "k"); len(got) != 0 {
			t.Fatalf("an abandoned effect still gates: %+v", got)
		}
		if ind, _ := s.IndeterminateEffects(ctx, "alice", "t1"); len(ind) != 0 {
			t.Fatalf("an abandoned effect is still reported: %+v", ind)
		}
		if hist, err := s.UnsettledHistory(ctx, "alice", "t1"); err != nil || len(hist) != 1 || hist[0].Resolution != ResolutionAbandoned {
			t.Fatalf("history: %+v, %v", hist, err)
		}

		for _, c := range []struct {
			name string
			r    ResolveEffect
			want error
		}{
			{"twice", r, ErrConflict},
			{"settled effect", ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: a1.Number, Seq: 99, To: ResolutionAbandoned, By: "x"}, ErrNotFound},
			{"other principal", ResolveEffect{PrincipalID: "bob", TaskID: "t1", Attempt: 1, Seq: 1, To: ResolutionAbandoned, By: "x"}, ErrNotFound},
			{"bad resolution", ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: 1, Seq: 1, To: ResolutionUnsettled, By: "x"}, ErrInvalid},
			{"no resolver", ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: 1, Seq: 1, To: ResolutionAbandoned}, ErrInvalid},
			{"resolver past the limit", ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: 1, Seq: 1, To: ResolutionAbandoned, By: strings.Repeat("b", maxResolvedBy+1)}, ErrInvalid},
			{"resolver at the limit", ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: 1, Seq: 1, To: ResolutionAbandoned, By: strings.Repeat("b", maxResolvedBy)}, ErrConflict},
		} {
			if _, err := s.ResolveEffect(ctx, c.r); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
	})
}

// An effect observed without a kept result is unsettled for the attempts
// after its own when its attempt died, and settled by its own attempt's
// completion; one observed with a kept result never is, even once a
// completion dropped the result. An approval's id resolves it.
func TestObservedUnreplayableEffects(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a1 := claimedTask(t, s, "alice", "t1")
		toolEffect(t, s, task, a1.Number, 1, "done", "", EffectObserved, nil)
		if got := gated(t, s, task, a1.Number, "done", ""); len(got) != 0 {
			t.Fatalf("its own attempt is gated by what it observed: %+v", got)
		}
		a2 := finishThenClaim(t, s, task, a1.Number)
		if hist, _ := s.UnsettledHistory(ctx, "alice", "t1"); len(hist) != 0 {
			t.Fatalf("a completed attempt's observed effect is still unsettled: %+v", hist)
		}
		toolEffect(t, s, task, a2.Number, 1, "big", "", EffectObserved, nil)
		toolEffect(t, s, task, a2.Number, 2, "kept", "", EffectObserved, []byte(`"r"`))
		if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "alice", TaskID: "t1", Number: a2.Number, Status: AttemptInterrupted, Reason: ReasonExecutorCrashed}); err != nil {
			t.Fatal(err)
		}
		a3, _, err := s.ClaimAttempt(ctx, "alice", "t1", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		a4 := finishThenClaim(t, s, task, a3.Number) // drops attempt 2's kept result
		got := gated(t, s, task, a4.Number, "big", "")
		if len(got) != 1 || got[0].Status != EffectObservedUnreplayable {
			t.Fatalf("attempt 4: gate found %+v, want attempt 2's observed_unreplayable effect", got)
		}
		if got := gated(t, s, task, a4.Number, "kept", ""); len(got) != 0 {
			t.Fatalf("an effect observed with its result kept is gated: %+v", got)
		}
		r, err := s.ResolveEffect(ctx, ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: a2.Number, Seq: 1, To: ResolutionRetryAuthorized, By: "a_123"})
		if err != nil || r.Resolution != ResolutionRetryAuthorized || r.ResolvedBy != "a_123" {
			t.Fatalf("authorize: %+v, %v", r, err)
		}
		if got := gated(t, s, task, a4.Number, "big", ""); len(got) != 0 {
			t.Fatalf("an authorized effect still gates: %+v", got)
		}
	})
}

// A store an older binary left migrates every indeterminate tool effect to
// unsettled, and an observed one without its result only after the task's
// last completed attempt; nothing else.
func TestMigrateEffectResolutions(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, s *Store) {
		t.Helper()
		hist, err := s.UnsettledHistory(context.Background(), "p", "t")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range hist {
			got = append(got, string(e.Summary)+"="+string(e.Resolution))
		}
		if want := "late-observed=unsettled early-indeterminate=unsettled"; strings.Join(got, " ") != want {
			t.Fatalf("migrated unsettled effects %q, want %q", strings.Join(got, " "), want)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path, db := sqliteAtVersion(t, 6)
		fillOldEffects(t, db)
		db.Close()
		s, err := Open(context.Background(), path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		ctx := context.Background()
		dsn := testpg.DSN(t)
		db := openPGDB(t, dsn)
		if err := migratePG(ctx, db, 3); err != nil {
			t.Fatal(err)
		}
		fillOldEffects(t, db)
		s, err := OpenPostgres(ctx, dsn, Options{}, PoolOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
	})
}

// fillOldEffects writes, as an older binary would have, task t with
// attempts 1 (interrupted), 2 (completed), 3 (interrupted) and effects
// named by their summary.
func fillOldEffects(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO tasks (id, principal_id, executor, spec, status, run_id,
			steps_limit, tool_calls_limit, model_calls_limit, depth_limit, wall_ms_limit, created_ns, updated_ns)
		VALUES ('t', 'p', 'legacy', $1, 'interrupted', 1, 10, 10, 10, 1, 1000000, 1, 1)`, []byte(`{}`))
	for n, st := range []string{"interrupted", "completed", "interrupted"} {
		exec(`INSERT INTO attempts (task_id, number, run_id, status, started_ns, ended_ns) VALUES ('t', $1, 1, $2, 1, 2)`, n+1, st)
	}
	for _, e := range []struct {
		attempt, seq       int
		kind, status, name string
		result             []byte
		replayed           int
	}{
		{1, 1, "tool", "indeterminate", "early-indeterminate", nil, 0},
		{1, 2, "tool", "observed", "early-observed", nil, 0}, // its result was dropped by attempt 2's completion
		{3, 1, "tool", "observed", "late-observed", nil, 0},
		{3, 2, "model", "indeterminate", "late-model", nil, 0},
		{3, 3, "tool", "observed", "late-kept", []byte(`"r"`), 0},
		{3, 4, "tool", "observed", "late-replayed", nil, 1},
		{3, 5, "tool", "failed", "late-failed", nil, 0},
	} {
		exec(`INSERT INTO effects (task_id, attempt, seq, kind, fingerprint, status, summary, replayed, result, created_ns, updated_ns)
			VALUES ('t', $1, $2, $3, 'f', $4, $5, $6, $7, 1, 1)`, e.attempt, e.seq, e.kind, e.status, e.name, e.replayed, e.result)
	}
}

// The lists of unsettled effects hold at most 100 (at and past the bound),
// and the gate finds a call's own effect whatever the list shows.
func TestUnsettledListsBounded(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		lim := defaultBudgets()
		lim.ToolCalls.Limit = 200
		if _, err := s.CreateTask(ctx, NewTask{ID: "t1", PrincipalID: "alice", Executor: "legacy", Spec: []byte(`{"goal":"g"}`), Limits: lim}); err != nil {
			t.Fatal(err)
		}
		task, err := s.StartRun(ctx, "alice", "t1", StatusPending)
		if err != nil {
			t.Fatal(err)
		}
		a1, task, err := s.ClaimAttempt(ctx, "alice", "t1", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		check := func(n, want int) {
			t.Helper()
			ind, err := s.IndeterminateEffects(ctx, "alice", "t1")
			if err != nil || len(ind) != want {
				t.Fatalf("%d unsettled: a step is told %d, %v; want %d", n, len(ind), err, want)
			}
			hist, err := s.UnsettledHistory(ctx, "alice", "t1")
			if err != nil || len(hist) != want {
				t.Fatalf("%d unsettled: status lists %d, %v; want %d", n, len(hist), err, want)
			}
		}
		for seq := int64(1); seq <= 101; seq++ {
			toolEffect(t, s, task, a1.Number, seq, fmt.Sprintf("f%d", seq), "", EffectDispatching, nil)
		}
		if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "alice", TaskID: "t1", Number: a1.Number, Status: AttemptInterrupted, Reason: ReasonExecutorCrashed}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SettleEffects(ctx, "alice", "t1"); err != nil {
			t.Fatal(err)
		}
		check(101, 100)
		if _, err := s.ResolveEffect(ctx, ResolveEffect{PrincipalID: "alice", TaskID: "t1", Attempt: 1, Seq: 1, To: ResolutionAbandoned, By: ResolvedByExecutor}); err != nil {
			t.Fatal(err)
		}
		ind, _ := s.IndeterminateEffects(ctx, "alice", "t1")
		if len(ind) != 100 || ind[99].Seq != 101 {
			t.Fatalf("100 unresolved: a step is told %d, the last %+v; want all 100", len(ind), ind[len(ind)-1])
		}
		a2, _, err := s.ClaimAttempt(ctx, "alice", "t1", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if got := gated(t, s, task, a2.Number, "f101", ""); len(got) != 1 || got[0].Seq != 101 {
			t.Fatalf("the gate found %+v for the 101st call", got)
		}
	})
}
