package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/testwait"
)

// groupRig holds a store's first group leader until released, so that the
// calls a test makes meanwhile queue up behind it deterministically.
type groupRig struct {
	s       *Store
	commits *atomic.Int64
	gate    chan struct{}
	mu      sync.Mutex
	sizes   []int
}

// newGroupRig opens a store whose commits are counted and whose first
// group leader waits for release.
func newGroupRig(t *testing.T, s *Store, commits *atomic.Int64) *groupRig {
	t.Helper()
	if s.group == nil {
		t.Fatal("a writable SQLite store has no committer")
	}
	r := &groupRig{s: s, commits: commits, gate: make(chan struct{})}
	s.group.hold = func(n int) {
		r.mu.Lock()
		r.sizes = append(r.sizes, n)
		r.mu.Unlock()
		<-r.gate
	}
	return r
}

func openCounted(t *testing.T) (*Store, *atomic.Int64) {
	t.Helper()
	commits := new(atomic.Int64)
	s := openTest(t, func(o *Options) { o.ObserveCommit = func(time.Duration) { commits.Add(1) } })
	return s, commits
}

func (r *groupRig) groupSizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.sizes...)
}

// lead starts call as the first leader and waits until it holds.
func (r *groupRig) lead(t *testing.T, call func() stepResult) <-chan stepResult {
	t.Helper()
	ch := r.queue(t, 0, call)
	testwait.Until(t, 10*time.Second, "the first leader to hold", func() bool { return len(r.groupSizes()) == 1 })
	return ch
}

// queue starts call and waits until queued callers number want.
func (r *groupRig) queue(t *testing.T, want int, call func() stepResult) <-chan stepResult {
	t.Helper()
	ch := make(chan stepResult, 1)
	go func() { ch <- call() }()
	if want > 0 {
		testwait.Until(t, 10*time.Second, fmt.Sprintf("%d queued callers", want), func() bool { return r.s.group.queued() == want })
	}
	return ch
}

func (r *groupRig) release() { close(r.gate) }

type stepResult struct {
	task      Task
	next      *Attempt
	exhausted *BudgetError
	err       error
}

// stepOf is the outcome of attempt a of task, completed with a checkpoint
// and an event, as the runner records it.
func stepOf(task Task, a Attempt, checkpoint int) FinishAttempt {
	return FinishAttempt{
		PrincipalID: task.PrincipalID, TaskID: task.ID, RunID: task.RunID, Number: a.Number,
		Status: AttemptCompleted, Outcome: "continue", Summary: "did a step",
		Checkpoint: make([]byte, checkpoint), WallMillisUsed: 10,
		Events: []NewEvent{{Type: "step.completed", Payload: []byte(`{"outcome":"continue"}`)}},
	}
}

func step(ctx context.Context, s *Store, f FinishAttempt) func() stepResult {
	return func() stepResult {
		t, next, ex, err := s.FinishAndClaim(ctx, f, NewEvent{Type: "step.started"})
		return stepResult{t, next, ex, err}
	}
}

func recv(t *testing.T, ch <-chan stepResult) stepResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("a step never returned")
		return stepResult{}
	}
}

// wantStepped checks that r reports the step stored, and that the store
// holds it exactly once: attempt 1 completed, attempt 2 running, two steps
// charged.
func wantStepped(t *testing.T, s *Store, id string, r stepResult) {
	t.Helper()
	if r.err != nil || r.next == nil || r.next.Number != 2 {
		t.Fatalf("step of %s: next %+v, err %v; want attempt 2", id, r.next, r.err)
	}
	got := getTask(t, s, "alice", id)
	if got.Budgets.Steps.Used != 2 || r.task.Budgets.Steps.Used != 2 {
		t.Errorf("%s: steps used %d stored, %d returned; want 2", id, got.Budgets.Steps.Used, r.task.Budgets.Steps.Used)
	}
	as := listAttempts(t, s, "alice", id)
	if len(as) != 2 || as[0].Status != AttemptCompleted || as[1].Status != AttemptRunning {
		t.Errorf("%s: attempts %+v, want 1 completed and 2 running", id, as)
	}
	evs := allEvents(t, s, "alice", id)
	if n := len(evs); n < 2 || evs[n-2].Type != "step.completed" || evs[n-1].Type != "step.started" {
		t.Errorf("%s: events %+v do not end with the step's", id, evs)
	}
}

// Two steps queued behind a running group share one commit, and both are
// stored.
func TestGroupCommitSharesOneCommit(t *testing.T) {
	t.Parallel()
	s, commits := openCounted(t)
	ctx := context.Background()
	tl, al := claimedTask(t, s, "alice", "lead")
	ta, aa := claimedTask(t, s, "alice", "a")
	tb, ab := claimedTask(t, s, "alice", "b")
	rig := newGroupRig(t, s, commits)
	before := commits.Load()

	cl := rig.lead(t, step(ctx, s, stepOf(tl, al, 1024)))
	ca := rig.queue(t, 1, step(ctx, s, stepOf(ta, aa, 1024)))
	cb := rig.queue(t, 2, step(ctx, s, stepOf(tb, ab, 1024)))
	rig.release()
	wantStepped(t, s, "lead", recv(t, cl))
	wantStepped(t, s, "a", recv(t, ca))
	wantStepped(t, s, "b", recv(t, cb))

	if got := rig.groupSizes(); !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("group sizes %v, want [1 2]", got)
	}
	if n := commits.Load() - before; n != 2 {
		t.Errorf("%d commits for three steps in groups of 1 and 2, want 2", n)
	}
}

// A member the store refuses gets its own error, exactly as alone, and
// nothing of it is stored; the other member of its group is stored. A
// caller whose context is cancelled after it queued is stored too, and
// one cancelled before it queued never joins.
func TestGroupCommitMemberRefused(t *testing.T) {
	t.Parallel()
	big := []byte(`{"pad":"` + strings.Repeat("x", DefaultLimits().EventPayload) + `"}`)
	tests := []struct {
		name   string
		change func(f *FinishAttempt)
		// cancel: 1 cancels the caller's context before it calls, 2 after
		// it queued.
		cancel int
		joins  bool
		check  func(t *testing.T, err error)
	}{
		{name: "stale attempt (the task row is updated before the refusal)", joins: true,
			change: func(f *FinishAttempt) { f.Number += 5 },
			check:  func(t *testing.T, err error) { wantErrIs(t, err, ErrNotFound) }},
		{name: "stale run", joins: true,
			change: func(f *FinishAttempt) { f.RunID++ },
			check: func(t *testing.T, err error) {
				var te *TransitionError
				if !errors.As(err, &te) {
					t.Fatalf("error = %v, want a *TransitionError", err)
				}
			}},
		{name: "event past its limit",
			change: func(f *FinishAttempt) { f.Events = []NewEvent{{Type: "step.completed", Payload: big}} },
			check: func(t *testing.T, err error) {
				var le *LimitError
				if !errors.As(err, &le) || le.Field != "event payload" {
					t.Fatalf("error = %v, want a *LimitError on the event payload", err)
				}
			}},
		{name: "cancelled before queueing", cancel: 1,
			check: func(t *testing.T, err error) { wantErrIs(t, err, context.Canceled) }},
		{name: "cancelled once queued", cancel: 2, joins: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, commits := openCounted(t)
			tl, al := claimedTask(t, s, "alice", "lead")
			ta, aa := claimedTask(t, s, "alice", "a")
			tb, ab := claimedTask(t, s, "alice", "b")
			before := snap(t, s, "alice", "a")
			rig := newGroupRig(t, s, commits)

			cl := rig.lead(t, step(context.Background(), s, stepOf(tl, al, 1024)))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel == 1 {
				cancel()
			}
			f := stepOf(ta, aa, 1024)
			if tt.change != nil {
				tt.change(&f)
			}
			queued := 0
			if tt.joins {
				queued = 1
			}
			ca := rig.queue(t, queued, step(ctx, s, f))
			if !tt.joins {
				ra := recv(t, ca) // refused at once: it never waits for the held leader
				tt.check(t, ra.err)
				if n := s.group.queued(); n != 0 {
					t.Fatalf("%d callers queued; a refused call must not join", n)
				}
			}
			if tt.cancel == 2 {
				cancel()
			}
			cb := rig.queue(t, queued+1, step(context.Background(), s, stepOf(tb, ab, 1024)))
			rig.release()
			wantStepped(t, s, "lead", recv(t, cl))
			wantStepped(t, s, "b", recv(t, cb))
			if !tt.joins {
				if got := snap(t, s, "alice", "a"); !reflect.DeepEqual(got, before) {
					t.Errorf("the refused step changed its task:\n got %+v\nwant %+v", got, before)
				}
				return
			}
			ra := recv(t, ca)
			if tt.check == nil {
				wantStepped(t, s, "a", ra)
			} else {
				tt.check(t, ra.err)
				if got := snap(t, s, "alice", "a"); !reflect.DeepEqual(got, before) {
					t.Errorf("the refused member changed its task:\n got %+v\nwant %+v", got, before)
				}
			}
			if got := rig.groupSizes(); !reflect.DeepEqual(got, []int{1, 2}) {
				t.Errorf("group sizes %v, want [1 2]", got)
			}
		})
	}
}

// When the shared transaction itself is lost — here a member ends it, as
// SQLite does after some I/O errors — no member is reported stored from
// it: each runs again alone, and a step is stored exactly once.
func TestGroupCommitLostTransactionRetriesAlone(t *testing.T) {
	t.Parallel()
	for _, killerFirst := range []bool{true, false} {
		for _, killerErr := range []error{nil, errors.New("refused after the rollback")} {
			t.Run(fmt.Sprintf("killer first %v, returns %v", killerFirst, killerErr), func(t *testing.T) {
				s, commits := openCounted(t)
				ctx := context.Background()
				tl, al := claimedTask(t, s, "alice", "lead")
				ta, aa := claimedTask(t, s, "alice", "a")
				rig := newGroupRig(t, s, commits)
				before := commits.Load()

				kill := func() stepResult {
					err := s.writeGrouped(ctx, func(ctx context.Context, tx *txn) error {
						if _, err := tx.tx.ExecContext(ctx, `ROLLBACK`); err != nil {
							return err
						}
						return killerErr
					})
					return stepResult{err: err}
				}
				cl := rig.lead(t, step(ctx, s, stepOf(tl, al, 1024)))
				var ck, ca <-chan stepResult
				if killerFirst {
					ck = rig.queue(t, 1, kill)
					ca = rig.queue(t, 2, step(ctx, s, stepOf(ta, aa, 1024)))
				} else {
					ca = rig.queue(t, 1, step(ctx, s, stepOf(ta, aa, 1024)))
					ck = rig.queue(t, 2, kill)
				}
				rig.release()
				wantStepped(t, s, "lead", recv(t, cl))
				wantStepped(t, s, "a", recv(t, ca))
				if rk := recv(t, ck); rk.err == nil {
					t.Error("the member that ended the transaction was reported stored")
				}
				if got := rig.groupSizes(); !reflect.DeepEqual(got, []int{1, 2}) {
					t.Errorf("group sizes %v, want [1 2]", got)
				}
				// The leader's commit and a's commit alone; the lost group
				// and the killer alone commit nothing.
				if n := commits.Load() - before; n != 2 {
					t.Errorf("%d commits, want 2", n)
				}
				// The writer is usable afterwards.
				if _, err := s.AppendEvents(ctx, "alice", "a", ta.RunID, NewEvent{Type: "step.progress"}); err != nil {
					t.Fatalf("a write after the lost group: %v", err)
				}
			})
		}
	}
}

// On a full disk every member of a group fails with a retryable
// *UnavailableError and none is half-written; once space is back the same
// steps are stored.
func TestGroupCommitFullDisk(t *testing.T) {
	t.Parallel()
	dir := testfs.MountTmpfs(t, t.TempDir(), 4<<20)
	commits := new(atomic.Int64)
	s, err := Open(context.Background(), filepath.Join(dir, "taskhost.db"), Options{
		Synchronous: "NORMAL", Now: newClock().Now,
		ObserveCommit: func(time.Duration) { commits.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	tl, al := claimedTask(t, s, "alice", "lead")
	ta, aa := claimedTask(t, s, "alice", "a")
	tb, ab := claimedTask(t, s, "alice", "b")
	ids := []string{"lead", "a", "b"}
	filler := testfs.FillDisk(t, dir)
	pad := NewEvent{Type: "step.progress", Payload: []byte(`{"pad":"` + strings.Repeat("x", 900) + `"}`)}
	_, err = s.AppendEvents(ctx, "alice", "lead", tl.RunID, pad)
	// Small commits can still fit in the WAL's last partly used page.
	for i := 0; err == nil && i < 1000; i++ {
		_, err = s.AppendEvents(ctx, "alice", "lead", tl.RunID, pad)
	}
	wantErrIs(t, err, ErrUnavailable)
	before := map[string]snapshot{}
	for _, id := range ids {
		before[id] = snap(t, s, "alice", id)
	}
	rig := newGroupRig(t, s, commits)
	steps := []FinishAttempt{stepOf(tl, al, 128<<10), stepOf(ta, aa, 128<<10), stepOf(tb, ab, 128<<10)}
	chans := []<-chan stepResult{rig.lead(t, step(ctx, s, steps[0]))}
	chans = append(chans, rig.queue(t, 1, step(ctx, s, steps[1])))
	chans = append(chans, rig.queue(t, 2, step(ctx, s, steps[2])))
	rig.release()
	for i, ch := range chans {
		r := recv(t, ch)
		var ue *UnavailableError
		if !errors.As(r.err, &ue) || ue.Class != "disk full" {
			t.Errorf("%s on a full disk: err = %v, want an *UnavailableError of class disk full", ids[i], r.err)
		}
	}
	for _, id := range ids {
		if got := snap(t, s, "alice", id); !reflect.DeepEqual(got, before[id]) {
			t.Errorf("%s was half-written on a full disk:\n got %+v\nwant %+v", id, got, before[id])
		}
	}
	if got := rig.groupSizes(); !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("group sizes %v, want [1 2]", got)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i, f := range steps {
		wantStepped(t, s, ids[i], step(ctx, s, f)())
	}
}

// A group holds at most maxGroup members: maxGroup queued callers share
// one commit, and one more waits for the next.
func TestGroupCommitBound(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		queued int
		sizes  []int
	}{
		{maxGroup, []int{1, maxGroup}},
		{maxGroup + 1, []int{1, maxGroup, 1}},
	} {
		t.Run(fmt.Sprint(tt.queued), func(t *testing.T) {
			s, commits := openCounted(t)
			ctx := context.Background()
			steps := make([]FinishAttempt, tt.queued+1)
			for i := range steps {
				task, a := claimedTask(t, s, "alice", fmt.Sprint("t", i))
				steps[i] = stepOf(task, a, 64)
			}
			rig := newGroupRig(t, s, commits)
			before := commits.Load()
			chans := []<-chan stepResult{rig.lead(t, step(ctx, s, steps[0]))}
			for i, f := range steps[1:] {
				chans = append(chans, rig.queue(t, i+1, step(ctx, s, f)))
			}
			rig.release()
			for i, ch := range chans {
				wantStepped(t, s, fmt.Sprint("t", i), recv(t, ch))
			}
			if got := rig.groupSizes(); !reflect.DeepEqual(got, tt.sizes) {
				t.Errorf("group sizes %v, want %v", got, tt.sizes)
			}
			if n := commits.Load() - before; n != int64(len(tt.sizes)) {
				t.Errorf("%d commits, want %d", n, len(tt.sizes))
			}
		})
	}
}

// Many tasks stepping at once, beside other writes, each store every step
// exactly once (run with -race).
func TestGroupCommitConcurrentSteps(t *testing.T) {
	t.Parallel()
	s, _ := openCounted(t)
	ctx := context.Background()
	const tasks, steps = 8, 12
	var wg sync.WaitGroup
	errs := make(chan error, tasks*2)
	for i := range tasks {
		id := fmt.Sprint("t", i)
		task, a := claimedTask(t, s, "alice", id)
		wg.Go(func() {
			for n := range steps {
				_, next, _, err := s.FinishAndClaim(ctx, stepOf(task, a, 256), NewEvent{Type: "step.started"})
				if err != nil || next == nil {
					errs <- fmt.Errorf("%s step %d: next %v, %w", id, n, next, err)
					return
				}
				a = *next
			}
		})
		wg.Go(func() {
			for range steps {
				if _, err := s.AppendEvents(ctx, "alice", id, task.RunID, NewEvent{Type: "step.progress"}); err != nil {
					errs <- fmt.Errorf("%s: AppendEvents: %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range tasks {
		id := fmt.Sprint("t", i)
		if got := getTask(t, s, "alice", id).Budgets.Steps.Used; got != steps+1 {
			t.Errorf("%s: %d steps used, want %d", id, got, steps+1)
		}
		if got := len(listAttempts(t, s, "alice", id)); got != steps+1 {
			t.Errorf("%s: %d attempts, want %d", id, got, steps+1)
		}
	}
}

// Only a writable SQLite store groups commits: PostgreSQL runs each step in
// its own SERIALIZABLE transaction, and a read-only store refuses writes
// before any queue.
func TestGroupCommitOnlyOnWritableSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "taskhost.db")
	s, err := Open(context.Background(), path, Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	task, a := claimedTask(t, s, "alice", "t1")
	if s.group == nil {
		t.Error("a writable SQLite store has no committer")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(context.Background(), path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	if ro.group != nil {
		t.Error("a read-only store has a committer")
	}
	_, _, _, err = ro.FinishAndClaim(context.Background(), stepOf(task, a, 16))
	wantErrIs(t, err, ErrReadOnly)
	if pg := openPostgres(t); pg.group != nil {
		t.Error("a PostgreSQL store has a committer")
	}
}
