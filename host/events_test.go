package host

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// syncBuffer is a log sink safe for the host's concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A secret in the goal never reaches an event or a host log line, whatever
// the task goes through: steps, progress notes, a crash, a resume.
func TestCanaryNeverInEventsOrLogs(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-7d1e0c2f-secret"
	var logs syncBuffer
	dir := testwait.ShortTempDir(t)
	h, err := Open(context.Background(), Options{
		DataDir: dir, Config: testConfig(t), ExecutorDir: executorDir(t),
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	goal := "find the report; the password is " + canary
	specJSON, _ := json.Marshal(map[string]any{"goal": goal, "testexec": map[string]any{"steps": 3, "progress": true, "exit_at_attempt": 2}})
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: specJSON})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusInterrupted, store.ReasonExecutorCrashed)
	if _, err := h.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")

	evs, err := h.Store.Events(context.Background(), alice, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, ev := range evs {
		types[ev.Type]++
		if bytes.Contains(ev.Payload, []byte(canary)) {
			t.Errorf("event %s carries the canary: %s", ev.Type, ev.Payload)
		}
		if len(ev.Payload) > 1024 {
			t.Errorf("event %s payload is %d bytes, limit 1024", ev.Type, len(ev.Payload))
		}
	}
	for _, want := range []string{EventTaskCreated, EventTaskStarted, EventStepStarted, EventStepCompleted, EventStepProgress, EventExecutorCrashed, EventStepInterrupted, EventTaskInterrupted, EventTaskResumed, EventTaskCompleted} {
		if types[want] == 0 {
			t.Errorf("no %s event (got %v)", want, types)
		}
	}
	if strings.Contains(logs.String(), canary) {
		t.Errorf("the host log carries the canary")
	}
	if logs.String() == "" {
		t.Errorf("no log output captured: the check above proves nothing")
	}
	// Nor any file of the data dir but the store, which holds the spec.
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), datadir.StoreFile) {
			return nil
		}
		if data, _ := os.ReadFile(path); bytes.Contains(data, []byte(canary)) {
			t.Errorf("%s carries the canary", path)
		}
		return nil
	})
}

func TestEventPayloadBounded(t *testing.T) {
	t.Parallel()
	task := store.Task{ID: strings.Repeat("t", 40), Executor: strings.Repeat("x", 32), Status: store.StatusWaitingApproval}
	ev := newEvent(EventStepProgress, task, EventPayload{Attempt: 1 << 40, Note: strings.Repeat("ü", 1000), Exit: "signal: killed", Reason: string(store.ReasonCheckpointIncompatible)})
	if len(ev.Payload) > 1024 {
		t.Fatalf("worst-case payload is %d bytes, limit 1024", len(ev.Payload))
	}
	var p EventPayload
	if err := json.Unmarshal(ev.Payload, &p); err != nil || len(p.Note) > maxProgressNote {
		t.Fatalf("payload %s: %v", ev.Payload, err)
	}
}
