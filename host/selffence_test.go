package host

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// TestBeatStateGrace: a host sweeps only after heartbeating without a
// break for a full lease — at start, after a failed heartbeat, and after a
// gap (a pause of the whole process) — and never once its last heartbeat
// is as old as the fence.
func TestBeatStateGrace(t *testing.T) {
	t.Parallel()
	fs := FleetSettings{Heartbeat: time.Second, Lease: 3 * time.Second, Poll: time.Second}
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type beat struct {
		at   float64
		fail bool
	}
	for _, tc := range []struct {
		name  string
		beats []beat
		now   float64
		want  bool
	}{
		{"at start", []beat{{at: 0}}, 0.1, false},
		{"just short of a lease", []beat{{at: 0}, {at: 1}, {at: 2}, {at: 2.9}}, 2.95, false},
		{"a full lease", []beat{{at: 0}, {at: 1}, {at: 2}, {at: 3}}, 3.1, true},
		{"a failure starts over", []beat{{at: 0}, {at: 1}, {at: 2}, {at: 3, fail: true}, {at: 4}, {at: 5}, {at: 6}}, 6.1, false},
		{"a lease after the failure", []beat{{at: 0}, {at: 1, fail: true}, {at: 2}, {at: 3}, {at: 4}, {at: 5}}, 5.1, true},
		{"a gap (paused) starts over", []beat{{at: 0}, {at: 1}, {at: 2}, {at: 3}, {at: 9}, {at: 10}}, 10.1, false},
		{"last heartbeat too old", []beat{{at: 0}, {at: 1}, {at: 2}, {at: 3}}, 5.5, false},
		{"failing now", []beat{{at: 0}, {at: 1}, {at: 2}, {at: 3}, {at: 4}, {at: 4.5, fail: true}}, 4.6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b beatState
			for _, x := range tc.beats {
				if x.fail {
					b.failed()
				} else {
					b.succeeded(at(x.at), at(x.at+0.01), fs)
				}
			}
			if got := b.maySweep(at(tc.now), fs); got != tc.want {
				t.Fatalf("maySweep = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFleetSelfFence: a host whose heartbeats stop reaching the store
// stops its own run — the step's cause is the self-fence, nothing is
// written for the run while the store is away — and, once it heartbeats
// again, ends the run itself as a sweep would have (interrupted,
// host_lost), closing its attempt, so the task can be resumed.
func TestFleetSelfFence(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		dir := newSharedStore(t, driver)
		// Another host shares the store: on SQLite, the one that makes
		// fencing worth it (a lone SQLite host has nobody to fence off).
		peer, err := dir.open("host-b")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { peer.Close() })
		if err := peer.RegisterHost(context.Background(), "test"); err != nil {
			t.Fatal(err)
		}
		st, err := dir.open("host-a")
		if err != nil {
			t.Fatal(err)
		}
		fs := FleetSettings{Heartbeat: 50 * time.Millisecond, Lease: 500 * time.Millisecond, Poll: 10 * time.Millisecond}
		set := DefaultSettings()
		set.DefaultExecutor = fakeKind
		set.Fleet = fs
		exe := newFakeExecutor()
		l := &fakeLauncher{Exe: exe}
		r := NewRunner(st, l, make([]byte, 32), set, ServiceConfig{}, t.TempDir(), hclog.NewNullLogger())
		var down atomic.Bool
		r.hostBeat = func(ctx context.Context) error {
			if down.Load() {
				return &store.UnavailableError{Class: "server unavailable", Err: errors.New("test: the store is away")}
			}
			return st.HeartbeatHost(ctx)
		}
		if err := r.StartFleet(context.Background(), "test"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			st.Close()
		})
		started, causes := blockedStep(exe)
		task, err := r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"fence"}`)})
		if err != nil {
			t.Fatal(err)
		}
		recv(t, started, "the step")
		down.Store(true)
		cause := recv(t, causes, "the step's cancellation")
		if !errors.Is(cause, errSelfFenced) {
			t.Fatalf("step cancelled by %v, want the self-fence", cause)
		}
		// Nothing was written for the run: it is still running, leased
		// here, with its attempt open.
		testwait.Until(t, 10*time.Second, "the run to stop", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.runs) == 0
		})
		if got := getTaskOf(t, st, task.ID); got.Status != store.StatusRunning || got.RunID != 1 {
			t.Fatalf("while the store is away the task is %s in run %d, want running in run 1 (nothing written)", got.Status, got.RunID)
		}
		down.Store(false)
		var got store.Task
		testwait.Until(t, 10*time.Second, "the host to end its stopped run", func() bool {
			got = getTaskOf(t, st, task.ID)
			return got.Status == store.StatusInterrupted
		})
		if got.Reason != store.ReasonHostLost || !strings.Contains(got.Message, "could not reach the store") {
			t.Fatalf("ended as %s (%q), want host_lost saying why", got.Reason, got.Message)
		}
		as, err := st.ListAttempts(context.Background(), alice, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Status == store.AttemptRunning {
				t.Fatalf("attempt %d left running", a.Number)
			}
		}
	})
}

// TestLoneSQLiteHostKeepsItsRuns: a host alone on its SQLite file whose
// heartbeats fail (a full disk) does not stop its runs: no other host can
// take them over, so fencing would only lose work.
func TestLoneSQLiteHostKeepsItsRuns(t *testing.T) {
	t.Parallel()
	dir := newSharedStore(t, "sqlite")
	st, err := dir.open("host-a")
	if err != nil {
		t.Fatal(err)
	}
	fs := FleetSettings{Heartbeat: 20 * time.Millisecond, Lease: 200 * time.Millisecond, Poll: 10 * time.Millisecond}
	set := DefaultSettings()
	set.DefaultExecutor = fakeKind
	set.Fleet = fs
	exe := newFakeExecutor()
	r := NewRunner(st, &fakeLauncher{Exe: exe}, make([]byte, 32), set, ServiceConfig{}, t.TempDir(), hclog.NewNullLogger())
	var beats atomic.Int64
	r.hostBeat = func(context.Context) error {
		beats.Add(1)
		return &store.UnavailableError{Class: "disk full", Err: errors.New("test: the disk is full")}
	}
	if err := r.StartFleet(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.Shutdown(ctx) //nolint:errcheck // the step is cancelled by the shutdown
		st.Close()
	})
	started, causes := blockedStep(exe)
	if _, err := r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"alone"}`)}); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the step")
	// Five leases' worth of failed heartbeats, counted, not slept.
	testwait.Until(t, 10*time.Second, "heartbeats to fail for five leases", func() bool { return beats.Load() >= 50 })
	select {
	case cause := <-causes:
		t.Fatalf("the lone host's step was stopped: %v", cause)
	default:
	}
}
