package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
)

// fleetClock is one clock the hosts of a test fleet share; advance moves it
// past a lease without sleeping.
type fleetClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fleetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond)
	return c.t
}

func (c *fleetClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// openFleet opens one store as len(ids) hosts (one Store handle each, as
// separate processes would have), all registered: one SQLite file, or one
// PostgreSQL database (skipped, with the reason, where there is no server).
func openFleet(t testing.TB, driver string, ids ...string) (*fleetClock, []*Store) {
	t.Helper()
	clock := &fleetClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "taskhost.db")
	var dsn string
	if driver == "postgres" {
		dsn = testpg.DSN(t)
	}
	var out []*Store
	for _, id := range ids {
		opts := Options{Synchronous: "NORMAL", Now: clock.Now, HostID: id}
		var s *Store
		var err error
		if dsn != "" {
			s, err = OpenPostgres(context.Background(), dsn, opts, PoolOptions{})
		} else {
			s, err = Open(context.Background(), path, opts)
		}
		if err != nil {
			t.Fatalf("open %s as %s: %v", driver, id, err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.RegisterHost(context.Background(), "test"); err != nil {
			t.Fatalf("RegisterHost(%s): %v", id, err)
		}
		out = append(out, s)
	}
	return clock, out
}

// fleetOpen opens a test's fleet on the driver forFleetDrivers chose.
type fleetOpen func(ids ...string) (*fleetClock, []*Store)

// forFleetDrivers runs test once per store driver, as subtests.
func forFleetDrivers(t *testing.T, test func(t *testing.T, openFleet fleetOpen)) {
	t.Helper()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			test(t, func(ids ...string) (*fleetClock, []*Store) { return openFleet(t, d.name, ids...) })
		})
	}
}

const testLease = 15 * time.Second

func lostEvents(t Task) []NewEvent { return []NewEvent{{Type: "task.interrupted"}} }

// TestSweepLostHost: host A stops heartbeating; B, which keeps its own
// heartbeat, takes A's task exactly when A's last heartbeat is older than
// the lease, not a moment before. The attempt, the effect in flight and the
// pending approval are settled as a crash's would be.
func TestSweepLostHost(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		clock, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		task, att := claimedTask(t, a, "p", "t1")
		if task.RunID != 1 {
			t.Fatalf("run %d, want 1", task.RunID)
		}
		if l, err := a.TaskLease(ctx, "p", "t1"); err != nil || l.Host != "host-a" || l.RunID != 1 {
			t.Fatalf("lease %+v, %v: want host-a in run 1", l, err)
		}
		if _, _, err := a.AdmitEffect(ctx, NewEffect{PrincipalID: "p", TaskID: "t1", RunID: 1, Attempt: att.Number, Seq: 1,
			Kind: EffectTool, Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.MarkEffect(ctx, MarkEffect{PrincipalID: "p", TaskID: "t1", Attempt: att.Number, Seq: 1, From: EffectAdmitted, To: EffectDispatching}); err != nil {
			t.Fatal(err)
		}
		if err := a.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		hosts, err := b.ListHosts(ctx)
		if err != nil || len(hosts) != 2 {
			t.Fatalf("ListHosts = %v, %v", hosts, err)
		}
		lastA := hosts[0].HeartbeatAt

		// The clock stands exactly at lastA + lease (the sweep's own reading
		// adds a microsecond, so aim a little short): A is still alive.
		clock.advance(lastA.Add(testLease).Sub(clock.Now()) - 2*time.Microsecond)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		if ids, err := b.SweepLostHosts(ctx, testLease, 5000, lostEvents); err != nil || len(ids) != 0 {
			t.Fatalf("sweep at the lease: %v, %v; want nothing taken", ids, err)
		}
		// One past it: lost.
		clock.advance(time.Millisecond)
		if ids, err := a.SweepLostHosts(ctx, testLease, 5000, lostEvents); err != nil || len(ids) != 0 {
			t.Fatalf("A swept its own task: %v, %v", ids, err)
		}
		ids, err := b.SweepLostHosts(ctx, testLease, 5000, lostEvents)
		if err != nil || !reflect.DeepEqual(ids, []string{"t1"}) {
			t.Fatalf("sweep past the lease: %v, %v; want [t1]", ids, err)
		}
		got := getTask(t, b, "p", "t1")
		if got.Status != StatusInterrupted || got.Reason != ReasonHostLost || got.RunID != 1 || !strings.Contains(got.Message, "host-a") {
			t.Fatalf("task after sweep: %s (%s) run %d %q", got.Status, got.Reason, got.RunID, got.Message)
		}
		if got.Budgets.WallMillis.Used != 5000 {
			t.Fatalf("wall used %d, want the 5000 ms charge", got.Budgets.WallMillis.Used)
		}
		as := listAttempts(t, b, "p", "t1")
		if len(as) != 1 || as[0].Status != AttemptInterrupted || as[0].Reason != ReasonHostLost {
			t.Fatalf("attempts %+v", as)
		}
		effs, err := b.ListEffects(ctx, "p", "t1")
		if err != nil || len(effs) != 1 || effs[0].Status != EffectIndeterminate {
			t.Fatalf("effects %+v, %v: want the dispatching one indeterminate", effs, err)
		}
		evs := allEvents(t, b, "p", "t1")
		if last := evs[len(evs)-1]; last.Type != "task.interrupted" {
			t.Fatalf("last event %s", last.Type)
		}
		// Nothing resumes by itself: a second sweep takes nothing.
		if ids, err := b.SweepLostHosts(ctx, testLease, 5000, lostEvents); err != nil || len(ids) != 0 {
			t.Fatalf("second sweep: %v, %v", ids, err)
		}
	})
}

// TestSweepClosesAttemptsOfLeftRuns: tasks cancelled, failed or paused
// through host B while host A runs them keep A's attempts running for A's
// runner to close; once A is lost, B's sweep closes each as that runner
// would have, and not a moment before.
func TestSweepClosesAttemptsOfLeftRuns(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		clock, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		claimedTask(t, a, "p", "cancelled")
		claimedTask(t, a, "p", "paused")
		claimedTask(t, a, "p", "live")
		if _, err := b.Cancel(ctx, "p", "cancelled"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Pause(ctx, "p", "paused", ReasonUserPause); err != nil {
			t.Fatal(err)
		}
		if err := a.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		attempt := func(id string) Attempt {
			t.Helper()
			return listAttempts(t, b, "p", id)[0]
		}
		// A is alive: its runner closes them.
		if _, err := b.SweepLostHosts(ctx, testLease, 0, lostEvents); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"cancelled", "paused", "live"} {
			if att := attempt(id); att.Status != AttemptRunning {
				t.Fatalf("%s: attempt %s while its host lives, want running", id, att.Status)
			}
		}
		clock.advance(testLease + time.Second)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		ids, err := b.SweepLostHosts(ctx, testLease, 0, lostEvents)
		if err != nil || !reflect.DeepEqual(ids, []string{"live"}) {
			t.Fatalf("sweep: %v, %v; want [live] taken", ids, err)
		}
		for id, want := range map[string]struct {
			status AttemptStatus
			reason Reason
		}{
			"cancelled": {AttemptCancelled, ReasonUserCancelled},
			"paused":    {AttemptInterrupted, ReasonUserPause},
			"live":      {AttemptInterrupted, ReasonHostLost},
		} {
			if att := attempt(id); att.Status != want.status || att.Reason != want.reason || att.EndedAt.IsZero() {
				t.Errorf("%s: attempt %s (%s) ended %v, want %s (%s)", id, att.Status, att.Reason, att.EndedAt, want.status, want.reason)
			}
		}
	})
}

// TestSweepCancelsApproval: a task waiting for an approval on a lost host
// is interrupted and its approval can no longer be approved.
func TestSweepCancelsApproval(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		clock, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		_, att := claimedTask(t, a, "p", "t1")
		if _, _, err := a.RequestApproval(ctx, NewApproval{ID: "a1", PrincipalID: "p", TaskID: "t1", RunID: 1, Attempt: att.Number,
			Seq: 1, Tool: "shell", ExpiresAt: clock.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		clock.advance(testLease + time.Second)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		if ids, err := b.SweepLostHosts(ctx, testLease, 0, nil); err != nil || len(ids) != 1 {
			t.Fatalf("sweep: %v, %v", ids, err)
		}
		if _, _, err := b.ResolveApproval(ctx, "p", "a1", ApprovalApproved); !errors.Is(err, ErrConflict) {
			t.Fatalf("approve after host_lost: %v, want a conflict", err)
		}
		ap, err := b.GetApproval(ctx, "p", "a1")
		if err != nil || ap.Status != ApprovalCancelled {
			t.Fatalf("approval %+v, %v: want cancelled", ap, err)
		}
	})
}

// TestStaleEpochRefused: after B took A's task over (sweep, then resume on
// B: run 2), every write A can still make for run 1 is refused as fenced,
// and nothing of B's run changes.
func TestStaleEpochRefused(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		clock, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		_, att := claimedTask(t, a, "p", "t1")
		clock.advance(testLease + time.Second)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.SweepLostHosts(ctx, testLease, 0, lostEvents); err != nil {
			t.Fatal(err)
		}
		nt, err := b.StartRun(ctx, "p", "t1", StatusInterrupted, NewEvent{Type: "task.resumed"})
		if err != nil || nt.RunID != 2 {
			t.Fatalf("resume on B: run %d, %v", nt.RunID, err)
		}
		if l, err := a.TaskLease(ctx, "p", "t1"); err != nil || l.Host != "host-b" || l.RunID != 2 {
			t.Fatalf("lease %+v, %v: want host-b in run 2", l, err)
		}
		attB, _, err := b.ClaimAttempt(ctx, "p", "t1", 2)
		if err != nil {
			t.Fatal(err)
		}
		before := snap(t, b, "p", "t1")

		writes := []struct {
			name  string
			write func() error
		}{
			{"FinishAttempt", func() error {
				_, err := a.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t1", RunID: 1, Number: att.Number,
					Status: AttemptCompleted, Outcome: "complete", Summary: "late", Result: []byte(`{}`), TaskTo: StatusCompleted})
				return err
			}},
			{"FinishAndClaim", func() error {
				_, _, _, err := a.FinishAndClaim(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t1", RunID: 1, Number: att.Number,
					Status: AttemptCompleted, Outcome: "continue", Summary: "late"})
				return err
			}},
			{"ClaimAttempt", func() error { _, _, err := a.ClaimAttempt(ctx, "p", "t1", 1); return err }},
			{"Heartbeat", func() error { return a.Heartbeat(ctx, "p", "t1", 1, 999_999) }},
			{"AppendEvents", func() error { _, err := a.AppendEvents(ctx, "p", "t1", 1, NewEvent{Type: "step.progress"}); return err }},
			{"AdmitEffect", func() error {
				_, _, err := a.AdmitEffect(ctx, NewEffect{PrincipalID: "p", TaskID: "t1", RunID: 1, Attempt: att.Number, Seq: 9,
					Kind: EffectTool, Fingerprint: "fp"})
				return err
			}},
			{"RequestApproval", func() error {
				_, _, err := a.RequestApproval(ctx, NewApproval{ID: "late", PrincipalID: "p", TaskID: "t1", RunID: 1,
					Attempt: att.Number, Seq: 9, ExpiresAt: clock.Now().Add(time.Hour)})
				return err
			}},
			{"EndRun", func() error {
				_, err := a.EndRun(ctx, EndRun{PrincipalID: "p", TaskID: "t1", RunID: 1, To: StatusInterrupted, Reason: ReasonHostShutdown})
				return err
			}},
		}
		for _, w := range writes {
			t.Run(w.name, func(t *testing.T) {
				err := w.write()
				var te *TransitionError
				if !errors.Is(err, ErrFenced) || !errors.As(err, &te) || te.RunID != 2 || te.WantRunID != 1 {
					t.Fatalf("stale write: %v, want ErrFenced naming run 2 over run 1", err)
				}
			})
		}
		// A's shutdown and restart touch only A's leases.
		if ids, err := a.InterruptRunning(ctx, ReasonHostShutdown, nil); err != nil || len(ids) != 0 {
			t.Fatalf("A's shutdown interrupted %v, %v", ids, err)
		}
		if rec, err := a.Recover(ctx, 5000, nil); err != nil || len(rec.Interrupted) != 0 || rec.AttemptsClosed != 0 {
			t.Fatalf("A's recovery: %+v, %v", rec, err)
		}
		if after := snap(t, b, "p", "t1"); !reflect.DeepEqual(before, after) {
			t.Fatalf("B's run changed:\nbefore %+v\nafter  %+v", before, after)
		}
		// B's own writes still go through.
		if _, err := b.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t1", RunID: 2, Number: attB.Number,
			Status: AttemptCompleted, Outcome: "complete", Summary: "done", Result: []byte(`{}`), TaskTo: StatusCompleted}); err != nil {
			t.Fatalf("B's finish: %v", err)
		}
	})
}

// TestLateWriteBeforeTakeover: between the sweep and a resume the task is
// interrupted in A's own run: A's late finish is refused (the attempt was
// closed by the sweep) and changes nothing.
func TestLateWriteBeforeTakeover(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		clock, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		_, att := claimedTask(t, a, "p", "t1")
		clock.advance(testLease + time.Second)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.SweepLostHosts(ctx, testLease, 0, lostEvents); err != nil {
			t.Fatal(err)
		}
		before := snap(t, b, "p", "t1")
		_, err := a.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t1", RunID: 1, Number: att.Number,
			Status: AttemptCompleted, Outcome: "complete", Summary: "late", Result: []byte(`{}`), TaskTo: StatusCompleted})
		wantErrIs(t, err, ErrConflict)
		if err := a.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t1", Number: att.Number, Status: AttemptCancelled, Reason: ReasonUserCancelled, WallMillisUsed: 1}); !errors.Is(err, ErrConflict) {
			t.Fatalf("late abandon: %v, want a conflict", err)
		}
		if _, err := a.EndRun(ctx, EndRun{PrincipalID: "p", TaskID: "t1", RunID: 1, To: StatusFailed, Reason: ReasonExecutorFailed}); !errors.Is(err, ErrConflict) {
			t.Fatalf("late end: %v, want a conflict", err)
		}
		if after := snap(t, b, "p", "t1"); !reflect.DeepEqual(before, after) {
			t.Fatalf("late writes changed the task:\nbefore %+v\nafter  %+v", before, after)
		}
	})
}

// TestRacingTakeovers: two sweepers race for a lost host's tasks and two
// hosts race to resume one: each task is taken exactly once, and resumed by
// exactly one host, whose lease it then carries.
func TestRacingTakeovers(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		const rounds = 30
		clock, hs := openFleet("host-a", "host-b", "host-c")
		a, b, c := hs[0], hs[1], hs[2]
		for i := range rounds {
			claimedTask(t, a, "p", fmt.Sprintf("t%02d", i))
		}
		clock.advance(testLease + time.Second)
		for _, s := range []*Store{b, c} {
			if err := s.HeartbeatHost(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		swept := make([][]string, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, s := range []*Store{b, c} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				swept[i], errs[i] = s.SweepLostHosts(ctx, testLease, 0, lostEvents)
			}()
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("sweeps: %v, %v", errs[0], errs[1])
		}
		if n := len(swept[0]) + len(swept[1]); n != rounds {
			t.Fatalf("swept %d + %d tasks, want %d in all", len(swept[0]), len(swept[1]), rounds)
		}

		for i := range rounds {
			id := fmt.Sprintf("t%02d", i)
			var wins [2]error
			start := make(chan struct{})
			var wg sync.WaitGroup
			for j, s := range []*Store{b, c} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, wins[j] = s.StartRun(ctx, "p", id, StatusInterrupted, NewEvent{Type: "task.resumed"})
				}()
			}
			close(start)
			wg.Wait()
			if (wins[0] == nil) == (wins[1] == nil) {
				t.Fatalf("%s: resume errors %v, %v: want exactly one winner", id, wins[0], wins[1])
			}
			winner, loser := "host-b", wins[1]
			if wins[0] != nil {
				winner, loser = "host-c", wins[0]
			}
			wantErrIs(t, loser, ErrConflict)
			l, err := a.TaskLease(ctx, "p", id)
			if err != nil || l.Host != winner || l.RunID != 2 || l.Status != StatusRunning {
				t.Fatalf("%s: lease %+v, %v; want %s in run 2", id, l, err, winner)
			}
		}
	})
}

// TestRecoverOnlyOwnLeases: a host restarting under its id interrupts its
// own live tasks (host_restart), never another live host's.
func TestRecoverOnlyOwnLeases(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		_, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		claimedTask(t, a, "p", "ta")
		_, attB := claimedTask(t, b, "p", "tb")
		rec, err := a.Recover(ctx, 5000, nil)
		if err != nil || !reflect.DeepEqual(rec.Interrupted, []string{"ta"}) || rec.AttemptsClosed != 1 {
			t.Fatalf("Recover on A: %+v, %v; want only ta", rec, err)
		}
		if got := getTask(t, a, "p", "ta"); got.Status != StatusInterrupted || got.Reason != ReasonHostRestart {
			t.Fatalf("ta: %s (%s)", got.Status, got.Reason)
		}
		if got := getTask(t, b, "p", "tb"); got.Status != StatusRunning {
			t.Fatalf("tb: %s, want still running on B", got.Status)
		}
		if as := listAttempts(t, b, "p", "tb"); as[len(as)-1].Number != attB.Number || as[len(as)-1].Status != AttemptRunning {
			t.Fatalf("tb's attempt: %+v", as)
		}
	})
}

// TestSweepBound: one sweep takes at most MaxSweep tasks; the next takes
// the rest.
func TestSweepBound(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		clock, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		for i := range MaxSweep + 1 {
			runningTask(t, a, "p", fmt.Sprintf("t%03d", i))
		}
		clock.advance(testLease + time.Second)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		first, err := b.SweepLostHosts(ctx, testLease, 0, nil)
		if err != nil || len(first) != MaxSweep {
			t.Fatalf("first sweep took %d, %v; want %d", len(first), err, MaxSweep)
		}
		second, err := b.SweepLostHosts(ctx, testLease, 0, nil)
		if err != nil || !reflect.DeepEqual(second, []string{fmt.Sprintf("t%03d", MaxSweep)}) {
			t.Fatalf("second sweep took %v, %v", second, err)
		}
	})
}

func TestHostIDBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		id string
		ok bool
	}{
		{"a", true},
		{strings.Repeat("h", MaxHostID), true},
		{strings.Repeat("h", MaxHostID+1), false},
		{"", false},
		{"host a", false},
		{"host/a", false},
		{"höst", false},
		{"web-1.eu_west", true},
	}
	for _, c := range cases {
		err := CheckHostID(c.id)
		if (err == nil) != c.ok {
			t.Errorf("CheckHostID(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "host_id")) {
			t.Errorf("CheckHostID(%q) = %v: want ErrInvalid naming host_id", c.id, err)
		}
		_, err = Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), Options{HostID: c.id})
		if c.id != "" && (err == nil) != c.ok {
			t.Errorf("Open with HostID %q: %v, want ok=%v", c.id, err, c.ok)
		}
	}
}

func TestHostHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, func(o *Options) { o.HostID = "solo" })
	if err := s.HeartbeatHost(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("heartbeat before register: %v, want ErrNotFound", err)
	}
	if err := s.RegisterHost(ctx, strings.Repeat("v", 65)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("65-byte version: %v, want ErrTooLarge", err)
	}
	if err := s.RegisterHost(ctx, strings.Repeat("v", 64)); err != nil {
		t.Fatal(err)
	}
	if err := s.HeartbeatHost(ctx); err != nil {
		t.Fatal(err)
	}
	unnamed := openTest(t)
	if err := unnamed.RegisterHost(ctx, "x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("register without a host id: %v, want ErrInvalid", err)
	}
}

func TestNotifyOnSQLite(t *testing.T) {
	t.Parallel()
	s := openTest(t, func(o *Options) { o.HostID = "solo" })
	if s.CanNotify() {
		t.Fatal("SQLite claims notifications")
	}
	if err := s.NotifyHost(context.Background(), "other"); err != nil {
		t.Fatalf("NotifyHost on SQLite: %v, want a no-op", err)
	}
	if err := s.Listen(context.Background(), time.Second, func() {}, nil); !errors.Is(err, ErrNoNotify) {
		t.Fatalf("Listen on SQLite: %v, want ErrNoNotify", err)
	}
}

// TestNotifyReachesOnlyItsHost: on PostgreSQL a listener wakes once when
// its LISTEN takes effect (for what it missed before), then a notification
// wakes the host it names and no other; a bad host id is refused.
func TestNotifyReachesOnlyItsHost(t *testing.T) {
	t.Parallel()
	_, hs := openFleet(t, "postgres", "host-a", "host-b", "host-c")
	a, b, c := hs[0], hs[1], hs[2]
	ctx, cancel := context.WithCancel(context.Background())
	woke := map[string]chan struct{}{"host-b": make(chan struct{}, 4), "host-c": make(chan struct{}, 4)}
	var wg sync.WaitGroup
	for _, s := range []*Store{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Listen(ctx, 10*time.Millisecond, func() { woke[s.HostID()] <- struct{}{} }, nil) //nolint:errcheck // ends with ctx
		}()
	}
	defer wg.Wait()
	defer cancel() // before the Wait: the listeners end with ctx
	// The wake of a LISTEN taking effect: after it, nothing is missed.
	for _, h := range []string{"host-b", "host-c"} {
		select {
		case <-woke[h]:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's listener never woke when its LISTEN took effect", h)
		}
	}
	if err := a.NotifyHost(ctx, "host-b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke["host-b"]:
	case <-time.After(10 * time.Second):
		t.Fatal("host-b never heard its notification")
	}
	select {
	case <-woke["host-c"]:
		t.Fatal("host-c woke for host-b's notification")
	default:
	}
	if err := a.NotifyHost(ctx, "bad host"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("notify a bad id: %v, want ErrInvalid", err)
	}
}

// TestSweepChargeBoundedByElapsed: the lost run is charged the wall
// heartbeat interval, but never more than has passed since the task's row
// was last written, and never past the limit.
func TestSweepChargeBoundedByElapsed(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		clock, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		task, _ := claimedTask(t, a, "p", "t1")
		if err := a.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		clock.advance(testLease + time.Second)
		if err := b.HeartbeatHost(ctx); err != nil {
			t.Fatal(err)
		}
		// A charge far above the time since the claim.
		if ids, err := b.SweepLostHosts(ctx, testLease, 10*testLease.Milliseconds(), lostEvents); err != nil || len(ids) != 1 {
			t.Fatalf("sweep: %v, %v", ids, err)
		}
		got := getTask(t, b, "p", "t1")
		elapsed := got.UpdatedAt.Sub(task.UpdatedAt).Milliseconds()
		if elapsed < testLease.Milliseconds() || got.Budgets.WallMillis.Used != task.Budgets.WallMillis.Used+elapsed {
			t.Fatalf("wall used %d (was %d), want the %d ms since the last write", got.Budgets.WallMillis.Used, task.Budgets.WallMillis.Used, elapsed)
		}
	})
}

// TestPausedHostReleasesRowLocks: a host paused (SIGSTOP, a long GC, a cut
// link) in the middle of a write transaction holds its task's row lock.
// The sweep passes over a locked row (SKIP LOCKED: it never waits behind a
// host's write), and the server ends the paused session after
// PoolOptions.IdleInTxTimeout, so a later sweep of a live host takes the
// task over, and the paused transaction can no longer commit.
func TestPausedHostReleasesRowLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testpg.DSN(t)
	clock := &fleetClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	open := func(id string, pool PoolOptions) *Store {
		s, err := OpenPostgres(ctx, dsn, Options{Now: clock.Now, HostID: id}, pool)
		if err != nil {
			t.Fatalf("open as %s: %v", id, err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.RegisterHost(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := open("host-a", PoolOptions{IdleInTxTimeout: 300 * time.Millisecond})
	b := open("host-b", PoolOptions{})
	claimedTask(t, a, "p", "t1")

	paused, err := a.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Rollback() //nolint:errcheck // the server ended it
	if _, err := paused.ExecContext(ctx, `SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, "t1"); err != nil {
		t.Fatal(err)
	}

	clock.advance(testLease + time.Second)
	if err := b.HeartbeatHost(ctx); err != nil {
		t.Fatal(err)
	}
	// The first sweep finds the row locked and passes over it at once.
	sweepCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ids, err := b.SweepLostHosts(sweepCtx, testLease, 0, lostEvents)
	if err != nil || len(ids) != 0 {
		t.Fatalf("sweep of a row a paused host holds = %v, %v; want nothing taken, no wait", ids, err)
	}
	// Far above the idle timeout: without it no sweep ever takes it.
	testwait.Until(t, 20*time.Second, "a sweep takes the paused host's task", func() bool {
		ids, err = b.SweepLostHosts(sweepCtx, testLease, 0, lostEvents)
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		return reflect.DeepEqual(ids, []string{"t1"})
	})
	if err := paused.Commit(); err == nil {
		t.Fatal("the paused host's transaction committed after the server should have ended it")
	}
	// The paused host's next write goes through a fresh connection, and is
	// fenced: its run is over.
	if l, err := a.TaskLease(ctx, "p", "t1"); err != nil || l.Status != StatusInterrupted {
		t.Fatalf("lease after the sweep = %+v, %v; want interrupted", l, err)
	}
}

func TestPoolOptionsIdleInTxTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      time.Duration
		want    time.Duration
		wantErr bool
	}{
		{0, DefaultIdleInTxTimeout, false},
		{time.Second, time.Second, false},
		{-time.Second, 0, true},
		{time.Millisecond, 0, true},
	} {
		p, err := PoolOptions{IdleInTxTimeout: tc.in}.normalize()
		if (err != nil) != tc.wantErr || (err == nil && p.IdleInTxTimeout != tc.want) {
			t.Errorf("normalize(IdleInTxTimeout %s) = %s, %v; want %s, error %v", tc.in, p.IdleInTxTimeout, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "idle_in_tx") {
			t.Errorf("error %q does not name the option", err)
		}
	}
}

// TestHostLoads: each host is listed with the live tasks leased to it —
// running and waiting_approval, not pending, finished or swept ones — and
// the list stops at its limit, saying there is more.
func TestHostLoads(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		_, hs := openFleet("host-a", "host-b", "host-c")
		a, b := hs[0], hs[1]
		claimedTask(t, a, "p", "a1")
		runningTask(t, a, "q", "a2")
		runningTask(t, a, "p", "a3")
		if _, err := a.Cancel(ctx, "p", "a3"); err != nil {
			t.Fatal(err)
		}
		createTask(t, a, "p", "pending") // no run: no lease
		runningTask(t, b, "p", "b1")

		got, more, err := b.HostLoads(ctx, MaxHostLoads)
		if err != nil || more {
			t.Fatalf("HostLoads: %v, more=%v", err, more)
		}
		owned := map[string]int64{}
		for _, h := range got {
			owned[h.ID] = h.Owned
			if h.Version != "test" || h.StartedAt.IsZero() || h.HeartbeatAt.Before(h.StartedAt) {
				t.Errorf("host %+v", h)
			}
		}
		if want := map[string]int64{"host-a": 2, "host-b": 1, "host-c": 0}; !reflect.DeepEqual(owned, want) {
			t.Fatalf("owned %v, want %v", owned, want)
		}

		for _, c := range []struct {
			limit int
			ids   []string
			more  bool
		}{{2, []string{"host-a", "host-b"}, true}, {3, []string{"host-a", "host-b", "host-c"}, false}} {
			got, more, err := a.HostLoads(ctx, c.limit)
			var ids []string
			for _, h := range got {
				ids = append(ids, h.ID)
			}
			if err != nil || more != c.more || !reflect.DeepEqual(ids, c.ids) {
				t.Errorf("HostLoads(%d) = %v, more=%v, %v; want %v, more=%v", c.limit, ids, more, err, c.ids, c.more)
			}
		}
		for _, limit := range []int{0, MaxHostLoads + 1} {
			if _, _, err := a.HostLoads(ctx, limit); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
				t.Errorf("HostLoads(%d): %v, want ErrInvalid naming the value", limit, err)
			}
		}
	})
}
