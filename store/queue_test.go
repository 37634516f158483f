package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func queueTask(id string) NewTask {
	return NewTask{ID: id, PrincipalID: "alice", Executor: "legacy", Spec: []byte(`{"goal":"q"}`), Limits: defaultBudgets()}
}

// TestQueueBound admits exactly limit pending tasks: the one past the
// bound is a *QueueFullError naming the bound, and writes nothing.
func TestQueueBound(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		const limit = 3
		for i := range limit {
			if _, err := s.CreateQueued(ctx, queueTask(fmt.Sprintf("t%d", i)), limit, false, NewEvent{Type: "task.created"}); err != nil {
				t.Fatalf("create %d of %d: %v", i+1, limit, err)
			}
		}
		_, err := s.CreateQueued(ctx, queueTask("past"), limit, false, NewEvent{Type: "task.created"})
		var qe *QueueFullError
		if !errors.As(err, &qe) || !errors.Is(err, ErrQueueFull) || qe.Limit != limit || qe.Queued != limit {
			t.Fatalf("create past the bound: %v, want a QueueFullError{%d, %d}", err, limit, limit)
		}
		if _, err := s.GetTask(ctx, "alice", "past"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("refused task stored: %v", err)
		}
		// A start frees a place; a resume that queues takes it.
		if _, err := s.StartRun(ctx, "alice", "t0", StatusPending); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, Transition{PrincipalID: "alice", TaskID: "t0", From: []Status{StatusRunning}, To: StatusInterrupted, Reason: ReasonHostRestart}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, "alice", "t0", limit, NewEvent{Type: "task.queued"}); err != nil {
			t.Fatalf("enqueue into the freed place: %v", err)
		}
		_, err = s.Enqueue(ctx, "alice", "t0", limit+1)
		var te *TransitionError
		if !errors.As(err, &te) || te.Current != StatusPending {
			t.Fatalf("second enqueue: %v, want a TransitionError from pending", err)
		}
		for _, bad := range []int{0, MaxQueueLimit + 1} {
			if _, err := s.CreateQueued(ctx, queueTask("bad"), bad, false); !errors.Is(err, ErrInvalid) {
				t.Errorf("bound %d: %v, want ErrInvalid", bad, err)
			}
		}
		if _, err := s.CreateQueued(ctx, queueTask("at-max"), MaxQueueLimit, false); err != nil {
			t.Errorf("bound %d: %v", MaxQueueLimit, err)
		}
	})
}

// TestQueueOrder is FIFO: creation order, and a resumed task at the tail;
// positions follow it, and a started task leaves the queue.
func TestQueueOrder(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		runningTask(t, s, "bob", "old")
		if _, err := s.Transition(ctx, Transition{PrincipalID: "bob", TaskID: "old", From: []Status{StatusRunning}, To: StatusInterrupted, Reason: ReasonHostRestart}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b", "c"} {
			if _, err := s.CreateQueued(ctx, queueTask(id), 10, false); err != nil {
				t.Fatal(err)
			}
		}
		q, err := s.Enqueue(ctx, "bob", "old", 10)
		if err != nil || q.Status != StatusPending || q.RunID != 1 || q.Reason != ReasonNone {
			t.Fatalf("Enqueue = %+v, %v; want pending, run 1, no reason", q, err)
		}
		want := []string{"a", "b", "c", "old"}
		got := queuedIDs(t, s)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("queue = %v, want %v", got, want)
		}
		pos, err := s.QueuePositions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range want {
			if pos[id] != int64(i+1) {
				t.Errorf("position of %s = %d, want %d", id, pos[id], i+1)
			}
		}
		started, err := s.StartRun(ctx, "bob", "old", StatusPending)
		if err != nil || started.RunID != 2 {
			t.Fatalf("start of the resumed task: %+v, %v; want run 2", started, err)
		}
		if pos, err := s.QueuePositions(ctx); err != nil || pos["old"] != 0 || pos["a"] != 1 {
			t.Errorf("positions after the start: %v, %v; want the started task gone, a still first", pos, err)
		}
		if n, err := s.CountQueued(ctx); err != nil || n != 3 {
			t.Errorf("CountQueued = %d, %v; want 3", n, err)
		}
	})
}

func queuedIDs(t *testing.T, s *Store) []string {
	t.Helper()
	ts, err := s.Queued(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range ts {
		ids = append(ids, x.ID)
	}
	return ids
}

// TestQueuePinned: a task held for one host is not offered to another.
func TestQueuePinned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/q.db"
	a, err := Open(ctx, path, Options{Synchronous: "NORMAL", HostID: "h-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path, Options{Synchronous: "NORMAL", HostID: "h-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.CreateQueued(ctx, queueTask("mine"), 10, true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateQueued(ctx, queueTask("any"), 10, false); err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(t, a); fmt.Sprint(got) != "[mine any]" {
		t.Errorf("host a sees %v, want [mine any]", got)
	}
	if got := queuedIDs(t, b); fmt.Sprint(got) != "[any]" {
		t.Errorf("host b sees %v, want [any]", got)
	}
}

// TestQueueBoundRace: admissions racing for the last places never pass
// the bound, on either engine.
func TestQueueBoundRace(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		const limit, racers = 5, 24
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted, full := 0, 0
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.CreateQueued(ctx, queueTask(fmt.Sprintf("r%d", i)), limit, false)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					admitted++
				case errors.Is(err, ErrQueueFull):
					full++
				default:
					t.Errorf("racer %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if admitted != limit || full != racers-limit {
			t.Fatalf("admitted %d, refused %d; want %d and %d", admitted, full, limit, racers-limit)
		}
		if n, err := s.CountQueued(ctx); err != nil || n != limit {
			t.Fatalf("queue holds %d (%v), want %d", n, err, limit)
		}
	})
}

// BenchmarkQueueAdmission measures a queued create and its start against
// a plain create and start in the same run: the queue's count, mark and
// lock are the difference. It reports queued/plain.
func BenchmarkQueueAdmission(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	measure := func(queued bool, n int) time.Duration {
		start := time.Now()
		for i := range n {
			nt := queueTask(fmt.Sprintf("%v-%d-%d", queued, b.N, i))
			var err error
			if queued {
				_, err = s.CreateQueued(ctx, nt, MaxQueueLimit, false, NewEvent{Type: "task.created"})
			} else {
				_, err = s.CreateTask(ctx, nt, NewEvent{Type: "task.created"})
			}
			if err == nil {
				_, err = s.StartRun(ctx, nt.PrincipalID, nt.ID, StatusPending)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	b.ResetTimer()
	plain := measure(false, b.N)
	queued := measure(true, b.N)
	b.ReportMetric(float64(queued)/float64(plain), "queued/plain")
}
