package api

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// fakeTasks is an in-memory Tasks + EventLog + Executors scoped by
// principal like the real Runner: enough to test the API's own logic.
type fakeTasks struct {
	mu      sync.Mutex
	tasks   map[string]store.Task // by id
	events  map[string][]store.Event
	seq     int64
	changed chan struct{}
	calls   int
	// err, when set, is returned by every call.
	err       error
	lastQuery store.ListQuery
	lastFiles []host.File
}

func newFake() *fakeTasks {
	return &fakeTasks{tasks: map[string]store.Task{}, events: map[string][]store.Event{}, changed: make(chan struct{})}
}

func (f *fakeTasks) add(principal, id string, st store.Status) store.Task {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t := store.Task{Seq: f.seq, ID: id, PrincipalID: principal, Executor: "testexec", Status: st, Spec: []byte(`{"goal":"g"}`),
		Budgets: store.Budgets{Steps: store.Budget{Limit: 20}}, CreatedAt: time.Unix(1700000000, 0), UpdatedAt: time.Unix(1700000000, 0)}
	f.tasks[id] = t
	return t
}

// emit appends an event and optionally moves the task to st.
func (f *fakeTasks) emit(id, typ string, st store.Status) {
	f.mu.Lock()
	t := f.tasks[id]
	if st != "" {
		t.Status = st
		f.tasks[id] = t
	}
	f.seq++
	f.events[id] = append(f.events[id], store.Event{Seq: f.seq, TaskID: id, Type: typ, Time: time.Now(), Payload: []byte(`{"status":"` + string(t.Status) + `"}`)})
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeTasks) get(principal, id string) (store.Task, error) {
	f.calls++
	if f.err != nil {
		return store.Task{}, f.err
	}
	t, ok := f.tasks[id]
	if !ok || t.PrincipalID != principal {
		return store.Task{}, fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	return t, nil
}

func (f *fakeTasks) Create(_ context.Context, principal string, req host.CreateRequest) (store.Task, error) {
	f.mu.Lock()
	f.calls++
	err := f.err
	f.lastFiles = req.Files
	f.mu.Unlock()
	if err != nil {
		return store.Task{}, err
	}
	return f.add(principal, fmt.Sprintf("t_%d", time.Now().UnixNano()), store.StatusRunning), nil
}

func (f *fakeTasks) Resume(_ context.Context, principal, id string) (store.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(principal, id)
}

func (f *fakeTasks) Cancel(_ context.Context, principal, id string) (store.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(principal, id)
}

func (f *fakeTasks) Get(_ context.Context, principal, id string) (store.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(principal, id)
}

func (f *fakeTasks) List(_ context.Context, principal string, q store.ListQuery) ([]store.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.lastQuery = q
	var out []store.Task
	from, to, step := q.AfterSeq+1, f.seq+1, int64(1)
	if q.Order == store.OrderNewest {
		from, to, step = f.seq, 0, -1
		if q.AfterSeq > 0 {
			from = q.AfterSeq - 1
		}
	}
	for seq := from; seq != to && len(out) < q.Limit; seq += step {
		for _, t := range f.tasks {
			if t.Seq == seq && f.matches(t, principal, q) {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

func (f *fakeTasks) matches(t store.Task, principal string, q store.ListQuery) bool {
	return (q.AllPrincipals || t.PrincipalID == principal) && (len(q.Status) == 0 || slices.Contains(q.Status, t.Status)) &&
		(q.Executor == "" || t.Executor == q.Executor)
}

func (f *fakeTasks) Count(_ context.Context, principal string, q store.ListQuery) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, t := range f.tasks {
		if f.matches(t, principal, q) {
			n++
		}
	}
	return n, nil
}

func (f *fakeTasks) Attempts(_ context.Context, principal, id string) ([]store.Attempt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(principal, id); err != nil {
		return nil, err
	}
	var out []store.Attempt
	for i := int64(1); i <= 60; i++ {
		out = append(out, store.Attempt{TaskID: id, Number: i, RunID: 1, Status: store.AttemptCompleted})
	}
	return out, nil
}

func (f *fakeTasks) Events(ctx context.Context, principal, id string, after int64) ([]store.Event, error) {
	for {
		f.mu.Lock()
		changed := f.changed
		f.mu.Unlock()
		evs, err := f.eventsNow(principal, id, after, 100)
		if err != nil || len(evs) > 0 {
			return evs, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fakeTasks) eventsNow(principal, id string, after int64, limit int) ([]store.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(principal, id); err != nil {
		return nil, err
	}
	var out []store.Event
	for _, e := range f.events[id] {
		if e.Seq > after && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeTasks) Approvals(context.Context, string, store.ApprovalStatus) ([]store.Approval, error) {
	return nil, nil
}

func (f *fakeTasks) Approve(_ context.Context, principal, id string) (store.Approval, error) {
	return store.Approval{}, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
}

func (f *fakeTasks) ApproveForTask(_ context.Context, principal, id, _ string) (store.Approval, error) {
	return store.Approval{}, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
}

func (f *fakeTasks) Answer(_ context.Context, principal, id string, _ []byte) (store.Approval, error) {
	return store.Approval{}, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
}

func (f *fakeTasks) Reject(_ context.Context, principal, id string) (store.Approval, error) {
	return store.Approval{}, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
}

// fakeEvents is the fake's non-blocking EventLog.
type fakeEvents struct{ f *fakeTasks }

func (e fakeEvents) Events(_ context.Context, principal, id string, after int64, limit int) ([]store.Event, error) {
	return e.f.eventsNow(principal, id, after, limit)
}

// fakeExecutors knows "testexec" (available, pinned) and "machinespirit"
// (disabled).
type fakeExecutors struct{}

func (fakeExecutors) Kinds() []string { return []string{"machinespirit", "testexec"} }

func (fakeExecutors) Describe(kind string) (plugin.Description, error) {
	if kind == "testexec" {
		return plugin.Description{Kind: kind, Version: "1.0.0", ProtocolVersion: 1, CheckpointSchemas: []string{"testexec/1"}}, nil
	}
	return plugin.Description{}, &plugin.UnavailableError{Kind: kind, Check: "disabled", Detail: "machinespirit is disabled"}
}

func (fakeExecutors) Spec(kind string) (plugin.PluginSpec, bool) {
	if kind == "testexec" {
		return plugin.PluginSpec{Kind: kind, Path: "/bin/testexec", SHA256: "ab"}, true
	}
	return plugin.PluginSpec{}, false
}
