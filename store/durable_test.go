package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// openFull is openTest at synchronous=FULL, the mode whose commits walSync
// makes durable.
func openFull(t *testing.T) *Store {
	t.Helper()
	s := openTest(t, func(o *Options) { o.Synchronous = "FULL" })
	if s.sync == nil {
		t.Fatal("a store at synchronous=FULL has no walSync")
	}
	return s
}

// fsyncGate holds the fsyncs of a store's log until released.
type fsyncGate struct {
	entered chan struct{} // closed when the first fsync is held
	release chan struct{}
	once    sync.Once
	err     error // what the fsyncs report once released
}

func holdFsyncs(s *Store) *fsyncGate {
	g := &fsyncGate{entered: make(chan struct{}), release: make(chan struct{})}
	s.sync.hold = func(uint64) error {
		g.once.Do(func() { close(g.entered) })
		<-g.release
		return g.err
	}
	return g
}

// let releases the held fsyncs, and every later one, with err.
func (g *fsyncGate) let(err error) {
	g.err = err
	close(g.release)
}

// A step is reported stored only once its commit is on disk, and a read
// that could see it returns only then too: while the log's fsync is held,
// both the step's caller and a reader of the task wait, and both see the
// step once it is released.
func TestFullStepAndReadWaitForFsync(t *testing.T) {
	t.Parallel()
	s := openFull(t)
	ctx := context.Background()
	task, a := claimedTask(t, s, "alice", "t")
	g := holdFsyncs(s)

	stepped := make(chan stepResult, 1)
	go func() { stepped <- step(ctx, s, stepOf(task, a, 64))() }()
	select {
	case <-g.entered: // the step committed; its caller runs the fsync
	case r := <-stepped:
		t.Fatalf("the step returned before the fsync of its commit: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("the step never reached its fsync")
	}
	read := make(chan Task, 1)
	go func() {
		got, err := s.GetTask(ctx, "alice", "t")
		if err != nil {
			t.Error(err)
		}
		read <- got
	}()
	testwait.Until(t, 10*time.Second, "the reader to wait for the fsync", func() bool {
		_, _, w := s.sync.stats()
		return w == 1 || len(read) > 0
	})
	if len(read) > 0 {
		t.Fatal("a read returned a commit before its fsync")
	}
	if len(stepped) > 0 {
		t.Fatal("the step returned before the fsync of its commit")
	}
	g.let(nil)
	if r := recv(t, stepped); r.err != nil || r.next == nil {
		t.Fatalf("step: %+v", r)
	}
	select {
	case got := <-read:
		if got.Budgets.Steps.Used != 2 {
			t.Errorf("the read after the fsync saw %d steps used, want 2", got.Budgets.Steps.Used)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read never returned")
	}
}

// Steps that commit while fsyncs are under way share the next one, and
// commit meanwhile: 16 tasks stepping at once, every fsync held until all
// 16 have committed, take maxFlushes+1 fsyncs between them.
func TestFullStepsShareFsyncs(t *testing.T) {
	t.Parallel()
	s := openFull(t)
	ctx := context.Background()
	const k = 16
	steps := make([]FinishAttempt, k)
	for i := range steps {
		task, a := claimedTask(t, s, "alice", fmt.Sprint("t", i))
		steps[i] = stepOf(task, a, 1024)
	}
	_, flushes0, _ := s.sync.stats()
	var held atomic.Int64
	var released atomic.Bool
	s.sync.hold = func(uint64) error {
		held.Add(1)
		// Every step has committed once each caller runs an fsync or
		// waits for one. That is seen once, by one holder, and lets every
		// hold go: a holder that looked later would count fewer, because
		// the waiters of a released fsync return and leave the count.
		// This runs on a step's goroutine, where t.Fatal must not be
		// called: a timeout fails that step instead, with the counts,
		// before recv's own 30 s give up on it without them.
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, f, w := s.sync.stats()
			if released.Load() || int64(w)+held.Load() >= k {
				released.Store(true)
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out waiting for every step to commit: %d commits, %d fsyncs, %d waiting, %d held", c, f, w, held.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	results := make([]chan stepResult, k)
	for i, f := range steps {
		results[i] = make(chan stepResult, 1)
		go func() { results[i] <- step(ctx, s, f)() }()
	}
	for i := range steps {
		r := recv(t, results[i])
		if r.err != nil || r.next == nil {
			t.Fatalf("step %d: err %v, next %v", i, r.err, r.next)
		}
	}
	_, flushes, _ := s.sync.stats()
	if n := flushes - flushes0; n > maxFlushes+1 {
		t.Errorf("%d fsyncs for %d steps committed while the fsyncs were held, want at most %d", n, k, maxFlushes+1)
	}
}

// A failed fsync fails the write that waited for it with a retryable
// *UnavailableError (its commit's durability is unknown), and every later
// write and read of the store with it: the kernel may have dropped the
// pages it could not write, so no later fsync proves them on disk. A
// reopened store works again.
func TestFullFsyncFailureIsSticky(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "taskhost.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task, a := claimedTask(t, s, "alice", "t")
	holdFsyncs(s).let(errors.New("injected EIO"))

	_, _, _, err = s.FinishAndClaim(ctx, stepOf(task, a, 64), NewEvent{Type: "step.started"})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Class != "I/O error" {
		t.Fatalf("step with a failed fsync: %v, want an I/O error *UnavailableError", err)
	}
	if _, err := s.AppendEvents(ctx, "alice", "t", task.RunID, NewEvent{Type: "x"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a write after the failed fsync: %v, want ErrUnavailable", err)
	}
	if _, err := s.GetTask(ctx, "alice", "t"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a read after the failed fsync: %v, want ErrUnavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.AppendEvents(ctx, "alice", "t", task.RunID, NewEvent{Type: "x"}); err != nil {
		t.Errorf("a write after reopening: %v", err)
	}
}
