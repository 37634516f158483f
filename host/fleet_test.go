package host

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// fleetHost is one Runner of an in-process fleet: its own store handle on
// the shared file (as a separate process would have) and its own fake
// executor.
type fleetHost struct {
	r   *Runner
	st  *store.Store
	l   *fakeLauncher
	exe *fakeExecutor
}

// sharedStore is one store a test's hosts share: a SQLite file, or a
// PostgreSQL database of the test's own.
type sharedStore struct{ path, dsn string }

// newSharedStore makes a fresh store on driver ("sqlite" or "postgres";
// the latter skips, with the reason, where there is no server).
func newSharedStore(t testing.TB, driver string) sharedStore {
	t.Helper()
	if driver == "postgres" {
		return sharedStore{dsn: testpg.DSN(t)}
	}
	return sharedStore{path: filepath.Join(t.TempDir(), datadir.StoreFile)}
}

func (ss sharedStore) open(id string) (*store.Store, error) {
	opts := store.Options{Synchronous: "NORMAL", HostID: id}
	if ss.dsn != "" {
		return store.OpenPostgres(context.Background(), ss.dsn, opts, store.PoolOptions{})
	}
	return store.Open(context.Background(), ss.path, opts)
}

// forFleetDrivers runs test once per store driver, as subtests.
func forFleetDrivers(t *testing.T, test func(t *testing.T, driver string)) {
	t.Helper()
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) { test(t, d) })
	}
}

// newFleetHost opens the shared store as host id and starts its fleet
// duties with fs.
func newFleetHost(t testing.TB, dir sharedStore, id string, fs FleetSettings) *fleetHost {
	t.Helper()
	st, err := dir.open(id)
	if err != nil {
		t.Fatalf("open store as %s: %v", id, err)
	}
	set := DefaultSettings()
	set.DefaultExecutor = fakeKind
	set.Fleet = fs
	exe := newFakeExecutor()
	l := &fakeLauncher{Exe: exe}
	r := NewRunner(st, l, make([]byte, 32), set, ServiceConfig{}, t.TempDir(), hclog.NewNullLogger())
	if err := r.StartFleet(context.Background(), "test"); err != nil {
		t.Fatalf("StartFleet(%s): %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown %s: %v", id, err)
		}
		st.Close()
	})
	return &fleetHost{r: r, st: st, l: l, exe: exe}
}

// quick are fleet timings for tests: a lost host is noticed within a
// second. The lease leaves a loaded test machine room: a host whose
// heartbeats stall for Lease − Heartbeat fences itself.
var quick = FleetSettings{Heartbeat: 20 * time.Millisecond, Lease: 400 * time.Millisecond, Poll: 10 * time.Millisecond}

// quickLongLease polls as quick does, with a lease that a heartbeat slowed
// by the race detector on a loaded machine never loses: for the tests in
// which no lease is meant to expire (under -race in CI, 400 ms fenced the
// owner mid-approval).
var quickLongLease = FleetSettings{Heartbeat: 20 * time.Millisecond, Lease: 5 * time.Second, Poll: 10 * time.Millisecond}

// silent is a host that registers, then never heartbeats again — a host
// paused or cut off from the store — while it still watches its leases.
var silent = FleetSettings{Heartbeat: time.Hour, Lease: 3 * time.Hour, Poll: 10 * time.Millisecond}

// deaf is silent and also never reads its leases: it learns of a takeover
// only when the store refuses its writes.
var deaf = FleetSettings{Heartbeat: time.Hour, Lease: 3 * time.Hour, Poll: time.Hour}

// blockedStep makes exe's steps wait for their context; each step's
// cancel cause is sent on the returned channel.
func blockedStep(exe *fakeExecutor) (started chan plugin.StepRequest, causes chan error) {
	started, causes = make(chan plugin.StepRequest, 8), make(chan error, 8)
	exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
		started <- req
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return plugin.StepResult{}, ctx.Err()
	}
	return started, causes
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func getTaskOf(t *testing.T, st *store.Store, id string) store.Task {
	t.Helper()
	task, err := st.GetTask(context.Background(), alice, id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TestFleetCrossHostCancel: a task runs on A; its principal cancels it
// through B. The cancel commits on B and reaches A's step context through
// the store; A closes the attempt as cancelled and stops its plugin.
func TestFleetCrossHostCancel(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		dir := newSharedStore(t, driver)
		a := newFleetHost(t, dir, "host-a", quickLongLease)
		b := newFleetHost(t, dir, "host-b", quickLongLease)
		started, causes := blockedStep(a.exe)
		task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fleet"}`)})
		if err != nil {
			t.Fatal(err)
		}
		recv(t, started, "A's step")
		t0 := time.Now()
		got, err := b.r.Cancel(context.Background(), alice, task.ID)
		if err != nil || got.Status != store.StatusCancelled {
			t.Fatalf("cancel on B: %s, %v", got.Status, err)
		}
		if cause := recv(t, causes, "A's step context cancelled"); !errors.Is(cause, errUserCancelled) {
			t.Fatalf("A's step ended with %v, want the user's cancel", cause)
		}
		t.Logf("cross-host cancel reached A's step in %s (poll %s)", time.Since(t0), quickLongLease.Poll)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.r.Wait(ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		checkAttempts(t, listAttemptsOf(t, b.st, task.ID), []wantAttempt{{status: store.AttemptCancelled, reason: store.ReasonUserCancelled}})
		if a.exe.stopCount() != 1 {
			t.Fatalf("A stopped its plugin %d times, want 1", a.exe.stopCount())
		}
	})
}

// TestFleetCrossHostApprove: A's step waits for an approval; the principal
// approves it through B; A's step goes on and completes.
func TestFleetCrossHostApprove(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		dir := newSharedStore(t, driver)
		a := newFleetHost(t, dir, "host-a", quickLongLease)
		b := newFleetHost(t, dir, "host-b", quickLongLease)
		decided := make(chan error, 1)
		a.exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			_, err := a.l.lastServices().RequestApproval(ctx, &pb.RequestApprovalRequest{TurnToken: req.TurnToken, Prompt: "go on?"})
			decided <- err
			if err != nil {
				return plugin.StepResult{}, err
			}
			return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "approved and done"}, nil
		}
		task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fleet"}`)})
		if err != nil {
			t.Fatal(err)
		}
		var pending []store.Approval
		testwait.Until(t, 10*time.Second, "a pending approval", func() bool {
			pending, _ = b.r.Approvals(context.Background(), alice, store.ApprovalPending)
			return len(pending) == 1
		})
		if _, err := b.r.Approve(context.Background(), alice, pending[0].ID); err != nil {
			t.Fatalf("approve on B: %v", err)
		}
		if err := recv(t, decided, "A's approval decision"); err != nil {
			t.Fatalf("A's step got %v, want the approval", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.r.Wait(ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		if got := getTaskOf(t, b.st, task.ID); got.Status != store.StatusCompleted {
			t.Fatalf("task %s (%s), want completed", got.Status, got.Reason)
		}
	})
}

// TestFleetCrossHostReject: a rejection through B fails the task and ends
// A's waiting step.
func TestFleetCrossHostReject(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		dir := newSharedStore(t, driver)
		a := newFleetHost(t, dir, "host-a", quickLongLease)
		b := newFleetHost(t, dir, "host-b", quickLongLease)
		decided := make(chan error, 1)
		a.exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
			_, err := a.l.lastServices().RequestApproval(ctx, &pb.RequestApprovalRequest{TurnToken: req.TurnToken, Prompt: "go on?"})
			decided <- err
			return plugin.StepResult{}, err
		}
		task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fleet"}`)})
		if err != nil {
			t.Fatal(err)
		}
		var pending []store.Approval
		testwait.Until(t, 10*time.Second, "a pending approval", func() bool {
			pending, _ = b.r.Approvals(context.Background(), alice, store.ApprovalPending)
			return len(pending) == 1
		})
		if _, err := b.r.Reject(context.Background(), alice, pending[0].ID); err != nil {
			t.Fatalf("reject on B: %v", err)
		}
		if err := recv(t, decided, "A's approval decision"); err == nil {
			t.Fatal("A's step was let through a rejected approval")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.r.Wait(ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		if got := getTaskOf(t, b.st, task.ID); got.Status != store.StatusFailed || got.Reason != store.ReasonApprovalRejected {
			t.Fatalf("task %s (%s), want failed (approval_rejected)", got.Status, got.Reason)
		}
	})
}

// TestFleetTakeover: A stops heartbeating mid-step. B marks the task
// host_lost within its lease, and a resume on B completes it with what is
// left of the budgets. A, whether it notices through its lease watch
// (silent) or only when its late outcome is refused (deaf), writes nothing
// after the takeover: the task's attempts and events after it are B's run's.
func TestFleetTakeover(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		for _, c := range []struct {
			name string
			a    FleetSettings
		}{{"silent", silent}, {"deaf", deaf}} {
			t.Run(c.name, func(t *testing.T) {
				dir := newSharedStore(t, driver)
				a := newFleetHost(t, dir, "host-a", c.a)
				release := make(chan struct{})
				started, causes := make(chan plugin.StepRequest, 1), make(chan error, 1)
				a.exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
					started <- req
					select {
					case <-ctx.Done():
						causes <- context.Cause(ctx)
					case <-release:
						causes <- nil
					}
					// A late outcome, as a paused host would send on waking.
					return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "A's late answer", Result: []byte(`"from A"`)}, nil
				}
				task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fleet"}`), Limits: Limits{Steps: 5}})
				if err != nil {
					t.Fatal(err)
				}
				recv(t, started, "A's step")
				t0 := time.Now()
				b := newFleetHost(t, dir, "host-b", quick)
				var lost store.Task
				testwait.Until(t, 10*time.Second, "host_lost on B", func() bool {
					lost = getTaskOf(t, b.st, task.ID)
					return lost.Status == store.StatusInterrupted
				})
				t.Logf("B took the task %s after it started (lease %s)", time.Since(t0), quick.Lease)
				if lost.Reason != store.ReasonHostLost {
					t.Fatalf("interrupted as %s, want host_lost", lost.Reason)
				}
				b.exe.StepF = func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
					if req.Remaining.Steps != 3 || req.RunID != 2 {
						return plugin.StepResult{}, errors.New("unexpected request")
					}
					return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "B done", Result: []byte(`"from B"`)}, nil
				}
				if _, err := b.r.Resume(context.Background(), alice, task.ID); err != nil {
					t.Fatalf("resume on B: %v", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := b.r.Wait(ctx, task.ID); err != nil {
					t.Fatal(err)
				}
				done := getTaskOf(t, b.st, task.ID)
				if done.Status != store.StatusCompleted || string(done.Result) != `"from B"` || done.RunID != 2 {
					t.Fatalf("after B's run: %s run %d result %s", done.Status, done.RunID, done.Result)
				}
				if c.a == deaf {
					close(release)
					if cause := recv(t, causes, "A's step end"); cause != nil {
						t.Fatalf("deaf A's step was cancelled (%v): it must learn only from the refusal", cause)
					}
				} else if cause := recv(t, causes, "A's step cancelled"); !errors.Is(cause, errFenced) {
					t.Fatalf("A's step ended with %v, want the lost lease", cause)
				}
				if err := a.r.Wait(ctx, task.ID); err != nil {
					t.Fatal(err)
				}
				if n := a.exe.stopCount(); n != 1 {
					t.Fatalf("A stopped its plugin %d times, want 1", n)
				}
				after := getTaskOf(t, b.st, task.ID)
				if after.Status != store.StatusCompleted || string(after.Result) != `"from B"` || after.RunID != 2 ||
					after.Budgets.Steps.Used != done.Budgets.Steps.Used {
					t.Fatalf("A's late run changed the task: %+v", after)
				}
				checkAttempts(t, listAttemptsOf(t, b.st, task.ID), []wantAttempt{
					{status: store.AttemptInterrupted, reason: store.ReasonHostLost},
					{status: store.AttemptCompleted, outcome: "complete"},
				})
				evs, err := b.st.Events(context.Background(), alice, task.ID, 0, 1000)
				if err != nil {
					t.Fatal(err)
				}
				var types []string
				for _, e := range evs {
					if e.RunID == 1 {
						types = append(types, e.Type)
					}
				}
				// Run 1's events end with the takeover; nothing of A's late
				// answer was recorded.
				if last := types[len(types)-1]; last != EventTaskInterrupted {
					t.Fatalf("run 1's events %v: want them to end with the takeover", types)
				}
				if !sort.SliceIsSorted(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq }) || evs[len(evs)-1].RunID != 2 {
					t.Fatalf("the last event is of run %d, want B's run 2", evs[len(evs)-1].RunID)
				}
			})
		}
	})
}

// TestFleetWatchFromOtherHost: a watch on B sees the events of a run on A
// without any local change on B.
func TestFleetWatchFromOtherHost(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		dir := newSharedStore(t, driver)
		a := newFleetHost(t, dir, "host-a", quickLongLease)
		b := newFleetHost(t, dir, "host-b", quickLongLease)
		started, _ := blockedStep(a.exe)
		task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fleet"}`)})
		if err != nil {
			t.Fatal(err)
		}
		recv(t, started, "A's step")
		evs, err := b.r.Events(context.Background(), alice, task.ID, 0)
		if err != nil || len(evs) == 0 {
			t.Fatalf("events on B: %v, %v", evs, err)
		}
		last := evs[len(evs)-1].Seq
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got := make(chan []store.Event, 1)
		go func() {
			evs, _ := b.r.Events(ctx, alice, task.ID, last)
			got <- evs
		}()
		if _, err := a.r.Cancel(context.Background(), alice, task.ID); err != nil {
			t.Fatal(err)
		}
		next := recv(t, got, "B's watch to see A's cancel")
		if len(next) == 0 || next[0].Type != EventTaskCancelled {
			t.Fatalf("B's watch got %+v, want task.cancelled", next)
		}
	})
}

func listAttemptsOf(t *testing.T, st *store.Store, id string) []store.Attempt {
	t.Helper()
	as, err := st.ListAttempts(context.Background(), alice, id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// TestFleetNotifyWakesOwner: on PostgreSQL a cancel through B reaches A's
// step through LISTEN/NOTIFY, with A's poll set so long that polling alone
// could not deliver it within the test.
func TestFleetNotifyWakesOwner(t *testing.T) {
	t.Parallel()
	// Only the notification can wake A (no poll); the lease is long enough
	// that a heartbeat slowed by the race detector on a loaded machine never
	// fences A before the cancel arrives (with 200 ms it did, in CI).
	noPoll := FleetSettings{Heartbeat: 50 * time.Millisecond, Lease: 5 * time.Second, Poll: time.Hour}
	dir := newSharedStore(t, "postgres")
	a := newFleetHost(t, dir, "host-a", noPoll)
	b := newFleetHost(t, dir, "host-b", noPoll)
	started, causes := blockedStep(a.exe)
	task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fleet"}`)})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, "A's step")
	t0 := time.Now()
	if _, err := b.r.Cancel(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, causes, "A's step context cancelled by the notification"); !errors.Is(cause, errUserCancelled) {
		t.Fatalf("A's step ended with %v, want the user's cancel", cause)
	}
	t.Logf("notified cancel reached A's step in %s", time.Since(t0))
}
