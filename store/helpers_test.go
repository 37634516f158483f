package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
)

// testClock is a deterministic clock: every reading is 1 ms after the last.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *testClock {
	return &testClock{t: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// openTest opens a fresh store in a temporary directory. Synchronous NORMAL
// keeps the many-commit tests fast; the semantics under test do not depend
// on it, and the benchmark measures both modes.
func openTest(t testing.TB, mods ...func(*Options)) *Store {
	t.Helper()
	opts := Options{Synchronous: "NORMAL", Now: newClock().Now}
	for _, m := range mods {
		m(&opts)
	}
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "taskhost.db"), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func defaultBudgets() Budgets {
	return Budgets{
		Steps:       Budget{Limit: 20},
		ToolCalls:   Budget{Limit: 50},
		ModelCalls:  Budget{Limit: 50},
		Depth:       Budget{Limit: 1},
		WallMillis:  Budget{Limit: 1_800_000},
		ModelTokens: Budget{Limit: 1_000_000},
		OutputBytes: Budget{Limit: 1 << 20},
	}
}

func createTask(t testing.TB, s *Store, principal, id string) Task {
	t.Helper()
	task, err := s.CreateTask(context.Background(), NewTask{
		ID: id, PrincipalID: principal, Executor: "legacy",
		Spec: []byte(`{"goal":"test"}`), Limits: defaultBudgets(),
	}, NewEvent{Type: "task.created", Payload: []byte(`{"executor":"legacy"}`)})
	if err != nil {
		t.Fatalf("CreateTask(%s): %v", id, err)
	}
	return task
}

// runningTask creates a task and starts its first run.
func runningTask(t testing.TB, s *Store, principal, id string) Task {
	t.Helper()
	createTask(t, s, principal, id)
	task, err := s.StartRun(context.Background(), principal, id, StatusPending, NewEvent{Type: "task.started"})
	if err != nil {
		t.Fatalf("StartRun(%s): %v", id, err)
	}
	return task
}

// claimedTask is a running task with a claimed (running) attempt.
func claimedTask(t testing.TB, s *Store, principal, id string) (Task, Attempt) {
	t.Helper()
	runningTask(t, s, principal, id)
	task, err := s.GetTask(context.Background(), principal, id)
	if err != nil {
		t.Fatal(err)
	}
	a, task, err := s.ClaimAttempt(context.Background(), principal, id, task.RunID, NewEvent{Type: "step.started"})
	if err != nil {
		t.Fatalf("ClaimAttempt(%s): %v", id, err)
	}
	return task, a
}

func getTask(t testing.TB, s *Store, principal, id string) Task {
	t.Helper()
	task, err := s.GetTask(context.Background(), principal, id)
	if err != nil {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return task
}

func allEvents(t testing.TB, s *Store, principal, id string) []Event {
	t.Helper()
	var out []Event
	var after int64
	for {
		page, err := s.Events(context.Background(), principal, id, after, 1000)
		if err != nil {
			t.Fatalf("Events(%s): %v", id, err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].Seq
	}
}

func listAttempts(t testing.TB, s *Store, principal, id string) []Attempt {
	t.Helper()
	as, err := s.ListAttempts(context.Background(), principal, id)
	if err != nil {
		t.Fatalf("ListAttempts(%s): %v", id, err)
	}
	return as
}

// snapshot is everything the store holds about one task, to prove that a
// refused call wrote nothing.
type snapshot struct {
	Task     Task
	Attempts []Attempt
	Events   []Event
}

func snap(t testing.TB, s *Store, principal, id string) snapshot {
	t.Helper()
	return snapshot{getTask(t, s, principal, id), listAttempts(t, s, principal, id), allEvents(t, s, principal, id)}
}

func wantErrIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want errors.Is %v", err, target)
	}
}

// allStatuses is every task status.
var allStatuses = []Status{StatusPending, StatusRunning, StatusWaitingApproval, StatusCompleted,
	StatusFailed, StatusCancelled, StatusInterrupted}

func TestMain(m *testing.M) { testpg.Main(m) }

// opener opens a fresh, empty store of one driver for a test.
type opener func(t testing.TB, mods ...func(*Options)) *Store

// drivers are the store's engines, each with how a test opens a fresh
// store on it: SQLite in a temporary file, PostgreSQL in a database of its
// own (testpg; skipped, with the reason, where there is no server).
var drivers = []struct {
	name string
	open opener
}{
	{"sqlite", openTest},
	{"postgres", openPostgres},
}

// forDrivers runs test once per driver, as subtests named after them.
func forDrivers(t *testing.T, test func(t *testing.T, open opener)) {
	t.Helper()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) { test(t, d.open) })
	}
}

// openPostgres opens a fresh store in a new PostgreSQL database.
func openPostgres(t testing.TB, mods ...func(*Options)) *Store {
	t.Helper()
	opts := Options{Now: newClock().Now}
	for _, m := range mods {
		m(&opts)
	}
	s, err := OpenPostgres(context.Background(), testpg.DSN(t), opts, PoolOptions{})
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}
