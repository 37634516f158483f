package host

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/store"
)

// A fleet is several hosts sharing one store (store/hosts.go has the lease
// and fencing model). On top of the store's leases, a Runner in a fleet:
//
//   - heartbeats its host row every FleetSettings.Heartbeat and, in the same
//     beat, sweeps: the running tasks of every other host whose heartbeat is
//     older than FleetSettings.Lease become interrupted (host_lost), with
//     step.interrupted and task.interrupted events; nothing resumes;
//   - every FleetSettings.Poll — and at once when another host notifies it
//     (PostgreSQL's LISTEN/NOTIFY, store/notify.go) — reads the lease of each run it holds and each
//     approval one of its steps waits for: a cancel or an approval committed
//     through another host reaches the run here — its step context is
//     cancelled, or the waiting step goes on — within one poll interval;
//   - stops a run whose lease it lost (the task was taken over, or another
//     host marked it host_lost): the step context is cancelled and the plugin
//     stopped, and nothing more is written for that run, not even the
//     attempt's close — the store refuses a stale run's writes (ErrFenced)
//     anyway, and the taker has already closed it. This is logged at ERROR:
//     it means this host was paused or cut off from the store for longer
//     than the lease;
//   - serves watches of tasks running anywhere: Events re-reads the store
//     every poll interval as well as on its own host's changes.
//
// Create and resume run on the host that receives them, within its own
// max_concurrent. A task's workspace lives in the data dir of the host that
// created it: a resume on another host starts with that host's (normally
// empty) workspace for the task — files are not carried over.

// FleetSettings are the Runner's fleet timings ([fleet]).
type FleetSettings struct {
	Heartbeat time.Duration // host row refresh and lost-host sweep
	Lease     time.Duration // a host silent this long loses its runs
	Poll      time.Duration // reads of remote cancels, approvals, takeovers, events
}

// errFenced is the cause a run is stopped with when its lease is gone.
var errFenced = errors.New("lease lost: the task was taken over by another run")

// HostIDFromKey derives a host id from a data dir's host key and, when the
// key is shared by a fleet, what else tells the hosts apart (the machine's
// name, the data dir's path): stable across restarts; with the key alone,
// carried by a backup, so a restored data dir recovers its own runs. 64
// bits of an HMAC: the key stays secret.
func HostIDFromKey(key []byte, distinct ...string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("taskhost host id"))
	for _, d := range distinct {
		m.Write([]byte{0})
		m.Write([]byte(d))
	}
	return "h-" + hex.EncodeToString(m.Sum(nil)[:8])
}

// StartFleet registers this host in the store and starts its fleet duties
// (heartbeat, sweep, lease watch) until Shutdown. A store opened without a
// host id is a lone, unnamed host: only the lease watch runs.
func (r *Runner) StartFleet(ctx context.Context, version string) error {
	named := r.store.HostID() != ""
	if named {
		if err := r.store.RegisterHost(ctx, version); err != nil {
			return err
		}
		r.sweep()
	}
	if r.store.CanNotify() {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-r.stopped; cancel() }()
			_ = r.store.Listen(ctx, r.set.Fleet.Heartbeat, r.watchLeases, func(err error) {
				r.log.Warn("fleet notifications lost; polling until they are back", "error", err)
			})
		}()
	}
	r.startLiveness(r.set.Fleet.Heartbeat)
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		beat := time.NewTicker(r.set.Fleet.Heartbeat)
		defer beat.Stop()
		for {
			select {
			case <-r.stopped:
				return
			case <-beat.C:
				if named {
					r.hostHeartbeat(version)
					r.sweep()
				}
			}
		}
	}()
	// The lease poll has a goroutine of its own: a heartbeat or sweep that
	// waits (a row lock, the store's retries) must not hold back a cancel
	// committed through another host when its notification is lost.
	go func() {
		defer r.wg.Done()
		poll := time.NewTicker(r.set.Fleet.Poll)
		defer poll.Stop()
		for {
			select {
			case <-r.stopped:
				return
			case <-poll.C:
				r.watchLeases()
			}
		}
	}()
	return nil
}

func (r *Runner) hostHeartbeat(version string) {
	ctx := context.Background()
	err := r.store.HeartbeatHost(ctx)
	if errors.Is(err, store.ErrNotFound) {
		err = r.store.RegisterHost(ctx, version)
	}
	if err != nil {
		r.log.Warn("host heartbeat not persisted", "host", r.store.HostID(), "error", err)
	}
}

// sweep interrupts the runs of lost hosts. The wall heartbeat interval is
// charged, as start-up recovery does: the lost host may have run that long
// past its last persisted reading (the store caps it at the time since the
// task was last written).
func (r *Runner) sweep() {
	ids, err := r.store.SweepLostHosts(context.Background(), r.set.Fleet.Lease, r.set.Heartbeat.Milliseconds(),
		func(t store.Task) []store.NewEvent {
			p := EventPayload{Reason: string(store.ReasonHostLost)}
			return []store.NewEvent{newEvent(EventStepInterrupted, t, p), newEvent(EventTaskInterrupted, t, p)}
		})
	if err != nil {
		r.log.Warn("lost-host sweep failed", "error", err)
		return
	}
	if len(ids) > 0 {
		r.log.Warn("tasks of a lost host interrupted (host_lost); resume them explicitly", "tasks", ids)
		r.notify()
	}
}

// watchLeases is one poll of the runs and approval waits this host holds,
// for changes committed through other hosts.
func (r *Runner) watchLeases() {
	ctx := context.Background()
	r.mu.Lock()
	runs := make([]*run, 0, len(r.runs))
	for _, ru := range r.runs {
		runs = append(runs, ru)
	}
	type wait struct {
		id string
		w  *waiter
	}
	waits := make([]wait, 0, len(r.waiters))
	for id, w := range r.waiters {
		waits = append(waits, wait{id, w})
	}
	r.mu.Unlock()

	changed := false
	for _, ru := range runs {
		if ru.ctx.Err() != nil {
			continue
		}
		l, err := r.store.TaskLease(ctx, ru.principal, ru.id)
		if err != nil {
			continue // a failing read is retried at the next poll
		}
		if cause := r.leaseCause(ru, l); cause != nil {
			if errors.Is(cause, errFenced) {
				r.log.Error("run stopped: its lease was lost (this host was paused or cut off from the store past the lease); nothing more is written for it",
					"task", ru.id, "run", ru.runID, "now_run", l.RunID, "now_host", l.Host, "status", l.Status, "reason", l.Reason)
			}
			ru.cancel(cause)
			changed = true
		}
	}
	for _, wt := range waits {
		a, err := r.store.GetApproval(ctx, wt.w.principal, wt.id)
		if err != nil || a.Status == store.ApprovalPending {
			continue
		}
		// The first decision wins; the local path may have delivered it.
		// An approval resolved elsewhere carries no value: an input
		// approval is only answered on the host its step waits on
		// (answeredHere), so what arrives here is a plain yes or a no.
		select {
		case wt.w.decision <- resolution{status: a.Status, value: []byte("null")}:
			changed = true
		default:
		}
	}
	if changed {
		r.notify()
	}
}

// notifyOwner wakes the host that holds principal's task id, when that is
// another host, after this one committed a change to the task (a cancel, an
// approval): on PostgreSQL it hears at once instead of at its next poll.
func (r *Runner) notifyOwner(ctx context.Context, principal, id string) {
	if !r.store.CanNotify() {
		return
	}
	l, err := r.store.TaskLease(ctx, principal, id)
	if err == nil {
		err = r.store.NotifyHost(ctx, l.Host)
	}
	if err != nil {
		r.log.Warn("owner not notified; it will see the change at its next poll", "task", id, "error", err)
	}
}

// answeredHere refuses to approve an input approval whose step waits on
// another host: the answer's value is not kept in the store, so only the
// waiting host can hand it over. A rejection, or any other approval, may
// come through any host.
func (r *Runner) answeredHere(ctx context.Context, principal string, a store.Approval, to store.ApprovalStatus) error {
	if to != store.ApprovalApproved || ApprovalKind(a) != ApprovalKindInput {
		return nil
	}
	l, err := r.store.TaskLease(ctx, principal, a.TaskID)
	if err != nil {
		return err
	}
	if me := r.store.HostID(); l.Host != "" && me != "" && l.Host != me {
		return fmt.Errorf("approval %s asks for an answer that only the host running its task can hand over: answer it through host %s: %w",
			a.ID, l.Host, ErrConflict)
	}
	return nil
}

// leaseCause is why run ru must stop given the lease l the store shows, or
// nil while ru still holds it.
func (r *Runner) leaseCause(ru *run, l store.Lease) error {
	host := r.store.HostID()
	switch {
	case l.RunID != ru.runID || (host != "" && l.Host != host):
		return errFenced
	case l.Status == store.StatusCancelled:
		return errUserCancelled
	case l.Status == store.StatusFailed && l.Reason == store.ReasonApprovalRejected:
		return errApprovalRejected
	case l.Status == store.StatusFailed && l.Reason == store.ReasonApprovalTimeout:
		return errApprovalExpired
	case l.Status == store.StatusInterrupted && l.Reason == store.ReasonHostLost:
		return errFenced
	}
	return nil
}
