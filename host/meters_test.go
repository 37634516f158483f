package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/store"
)

// used reads the used part of a "used/limit" meter.
func used(t *testing.T, meter string) int64 {
	t.Helper()
	u, _, ok := strings.Cut(meter, "/")
	n, err := strconv.ParseInt(u, 10, 64)
	if !ok || err != nil {
		t.Fatalf("meter %q is not used/limit", meter)
	}
	return n
}

// checkMonotonic fails unless every budget meter in evs, in order, never
// goes down, and returns the last wall_s used.
func checkMonotonic(t *testing.T, evs []store.Event) int64 {
	t.Helper()
	var last [4]int64
	var prev [4]string
	names := [4]string{"steps", "tools", "models", "wall_s"}
	for _, e := range evs {
		var p EventPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatalf("event %d: %v", e.Seq, err)
		}
		for i, m := range [4]string{p.Steps, p.Tools, p.Models, p.WallSecs} {
			if m == "" {
				continue
			}
			u := used(t, m)
			if u < last[i] {
				t.Errorf("event %d %s: %s %d after %d (%s): a meter went backwards", e.Seq, e.Type, names[i], u, last[i], prev[i])
			}
			last[i], prev[i] = u, fmt.Sprintf("event %d %s", e.Seq, e.Type)
		}
	}
	return last[3]
}

// Every event of a run with steps that cross second boundaries, approval
// waits, a plugin crash and a resume shows budget meters that never go
// backwards — above all wall_s, which step.started used to report from
// before the step that had just finished.
func TestEventMetersNeverGoBackwards(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	ctx := context.Background()
	task := create(t, h, alice, map[string]any{
		"steps": 3, "sleep_ms": 700, "request_approval": true, "kill_at_attempt": 2, "call_model": true,
	}, Limits{})
	// The approver takes a while to answer: the wait spans a second.
	approve := func() {
		t.Helper()
		a := waitApproval(t, h, alice, task.ID)
		time.Sleep(600 * time.Millisecond)
		if _, err := h.Runner.Approve(ctx, alice, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	approve() // attempt 1; attempt 2 is killed before it asks
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusInterrupted, store.ReasonExecutorCrashed)
	if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	approve() // attempt 3 (step 2)
	approve() // attempt 4 (step 3)
	got = waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, "")

	evs, err := h.Store.Events(ctx, alice, task.ID, 0, 500)
	if err != nil {
		t.Fatal(err)
	}
	var started int
	for _, e := range evs {
		if e.Type == EventStepStarted {
			started++
		}
	}
	if started != 4 {
		t.Fatalf("%d step.started events, want 4", started)
	}
	wall := checkMonotonic(t, evs)
	// Three steps of 700 ms ran to the end; the approval waits are not
	// active time.
	if wall < 2 || wall != got.Budgets.WallMillis.Used/1000 {
		t.Errorf("last wall_s = %d, want the task's %d ms (at least 2 s)", wall, got.Budgets.WallMillis.Used)
	}
}
