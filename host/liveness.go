package host

import (
	"context"
	"time"

	"github.com/taskhost/taskhost/store"
)

// The liveness check keeps one promise: a task is never running (or
// waiting_approval) in the store, leased to this host, without a live run
// of this host that owns it. The run's own code ends the task on every path
// it knows of (first, finish, storeFailed); what it cannot know is a write
// that committed while the store told it otherwise — a claim, a finish or a
// start whose acknowledgement was lost with the connection. Every
// FleetSettings.Heartbeat the host lists its leased live tasks; one seen at
// two checks in a row in the same run with no run of this host holding it
// is lost, and is interrupted (run_lost) like a lost host's task: attempt
// closed, effects settled, approvals cancelled. Two sightings, because a run
// is registered a moment after its start commits and unregistered a moment
// after its end does. A run self-fencing stopped (fleet.go) is not lost: it
// is ended, as host_lost, by the fencing's own clean-up once the store
// answers.

// livenessCheck is the state of the check between two rounds: the runs seen
// without a holder at the last round, by task id.
type livenessCheck struct {
	suspects map[string]store.RunRef
}

// check runs one round and returns the tasks it interrupted.
func (lc *livenessCheck) check(ctx context.Context, r *Runner) []string {
	refs, err := r.store.LeasedRuns(ctx)
	if err != nil {
		r.log.Warn("liveness check: leased tasks not readable; checked again at the next round", "error", err)
		return nil
	}
	fenced := r.fencedRuns()
	r.mu.Lock()
	seen := make(map[string]store.RunRef)
	var lost []store.RunRef
	for _, ref := range refs {
		if ru := r.runs[ref.TaskID]; ru != nil && ru.runID == ref.RunID {
			continue
		}
		if fenced[lostRun{id: ref.TaskID, runID: ref.RunID}] {
			continue // self-fencing stopped it and ends it as host_lost (endLostRuns)
		}
		seen[ref.TaskID] = ref
		if prev, ok := lc.suspects[ref.TaskID]; ok && prev.RunID == ref.RunID {
			lost = append(lost, ref)
		}
	}
	r.mu.Unlock()
	lc.suspects = seen
	if len(lost) == 0 {
		return nil
	}
	ids, err := r.store.InterruptRuns(ctx, lost, store.ReasonRunLost,
		"the host found the task running with no run of its own holding it (a store write's acknowledgement was lost); resume it",
		r.set.Heartbeat.Milliseconds(), func(t store.Task) []store.NewEvent {
			p := EventPayload{Reason: string(store.ReasonRunLost)}
			return []store.NewEvent{newEvent(EventStepInterrupted, t, p), newEvent(EventTaskInterrupted, t, p)}
		})
	if err != nil {
		r.log.Warn("liveness check: lost runs not interrupted; tried again at the next round", "tasks", len(lost), "error", err)
		return nil
	}
	for _, id := range ids {
		delete(lc.suspects, id)
		r.set.Observer.RunLost()
	}
	if len(ids) > 0 {
		r.log.Error("tasks running with no live run of this host interrupted (run_lost); resume them explicitly", "tasks", ids)
		r.notify()
	}
	return ids
}

// startLiveness runs the liveness check every interval until Shutdown.
func (r *Runner) startLiveness(interval time.Duration) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var lc livenessCheck
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stopped:
				return
			case <-t.C:
				lc.check(context.Background(), r)
			}
		}
	}()
}

// fencedRuns are the runs self-fencing stopped and has not ended yet.
func (r *Runner) fencedRuns() map[lostRun]bool {
	r.beat.mu.Lock()
	defer r.beat.mu.Unlock()
	m := make(map[lostRun]bool, len(r.beat.lost))
	for _, l := range r.beat.lost {
		m[l] = true
	}
	return m
}
