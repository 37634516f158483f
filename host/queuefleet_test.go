package host

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// TestFleetQueueExactlyOnce: tasks queued on a busy host are started by
// whichever host of the fleet has a free slot, each exactly once, and all
// of them complete.
func TestFleetQueueExactlyOnce(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		dir := newSharedStore(t, driver)
		// Leases long enough that a loaded machine does not make a host
		// fence itself: this test is about the queue, not lost hosts.
		relaxed := FleetSettings{Heartbeat: 100 * time.Millisecond, Lease: 10 * time.Second, Poll: 20 * time.Millisecond}
		a := newFleetHost(t, dir, "host-a", relaxed)
		b := newFleetHost(t, dir, "host-b", relaxed)
		a.r.setLimits(2, 0)
		b.r.setLimits(2, 0)
		gate := make(chan struct{})
		var mu sync.Mutex
		steps := map[string]map[string]int{} // task → host → steps
		step := func(host string) func(context.Context, plugin.StepRequest) (plugin.StepResult, error) {
			return func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
				mu.Lock()
				if steps[req.TaskID] == nil {
					steps[req.TaskID] = map[string]int{}
				}
				steps[req.TaskID][host]++
				mu.Unlock()
				select {
				case <-gate:
				case <-ctx.Done():
					return plugin.StepResult{}, ctx.Err()
				}
				return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "done"}, nil
			}
		}
		a.exe.StepF, b.exe.StepF = step("a"), step("b")
		const n = 10
		var ids []string
		for range n {
			task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"queued"}`)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, task.ID)
		}
		running := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(steps)
		}
		// A's two slots and B's two: four tasks start, the rest wait.
		testwait.Until(t, 10*time.Second, "both hosts to fill their slots", func() bool { return running() == 4 })
		close(gate)
		// On a timeout the error says where each task is: CI's loaded race
		// run once timed out here with no word of which task was stuck.
		ends := map[string]string{}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("tasks at the end: %v", ends)
			}
		})
		testwait.Until(t, 60*time.Second, "every task to complete", func() bool {
			done := true
			for _, id := range ids {
				got := getTaskOf(t, a.st, id)
				ends[id] = string(got.Status) + "/" + string(got.Reason) + " " + got.Message
				done = done && got.Status == store.StatusCompleted
			}
			return done
		})
		mu.Lock()
		defer mu.Unlock()
		byHost := map[string]int{}
		for _, id := range ids {
			total := 0
			for h, c := range steps[id] {
				total += c
				byHost[h] += c
			}
			if total != 1 {
				t.Errorf("task %s stepped %d times (%v), want once", id, total, steps[id])
			}
			if task := getTaskOf(t, a.st, id); task.RunID != 1 {
				t.Errorf("task %s ran %d runs, want 1", id, task.RunID)
			}
		}
		if byHost["b"] == 0 {
			t.Errorf("host B started none of the queued tasks (%v)", byHost)
		}
		t.Logf("steps by host: %v", byHost)
	})
}
