package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/taskhost/taskhost/store"
)

// A fleet is several hosts sharing one store (store/hosts.go has the lease
// and fencing model). On top of the store's leases, a Runner in a fleet:
//
//   - heartbeats its host row every FleetSettings.Heartbeat, on a goroutine
//     of its own and (on PostgreSQL) a connection of its own: one
//     autocommit UPDATE that waits for no other write, no sweep and no
//     lease poll;
//   - every FleetSettings.Heartbeat, on another goroutine, sweeps: the
//     running tasks of every other host whose heartbeat is older than
//     FleetSettings.Lease become interrupted (host_lost), with
//     step.interrupted and task.interrupted events; nothing resumes. It
//     sweeps only once it has itself heartbeated successfully, without a
//     break, for a full lease (the grace): after a store outage, or at
//     start, every host's heartbeat is as old as the outage, and a host
//     that swept at once would take over every live host's tasks before
//     they could heartbeat again;
//   - fences itself: when its last successful heartbeat was sent
//     Lease − Heartbeat ago, and another host could sweep it (always on
//     PostgreSQL; on SQLite once another host shares the file), it stops
//     every run it holds, with a cause that
//     writes nothing more for them (as a lost lease does), and says so at
//     ERROR. Once the store answers again it ends those runs itself, as a
//     sweep would (interrupted, host_lost), unless a sweep or a cancel got
//     there first;
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
// Why self-fencing comes first. Host A's row holds the wall time A sent
// with its last successful heartbeat, s. Another host B may sweep A once
// B's clock reads past s + Lease. A fences at s + Lease − Heartbeat on its
// own clock, checked every Heartbeat/4: it has stopped its runs by
// s + Lease − 3/4·Heartbeat at the latest, which is before any sweep as
// long as the hosts' clocks agree to within 3/4 of a heartbeat (1 s
// heartbeats: 750 ms; NTP keeps them within milliseconds). The
// configuration keeps Lease ≥ 2·Heartbeat + 1 s, so at least one heartbeat
// fails before a host fences itself: a single slow beat never does.
//
// Create and resume start on the host that receives them when it has a
// free slot; beyond its max_concurrent the task waits in the store's one
// queue and starts on whichever host frees a slot first (queue.go). A
// task's workspace lives in the store as of its last committed step, and
// every run, on any host, starts by making that host's copy of it match
// (workspace.go).

// FleetSettings are the Runner's fleet timings ([fleet]).
type FleetSettings struct {
	Heartbeat time.Duration // host row refresh and lost-host sweep
	Lease     time.Duration // a host silent this long loses its runs
	Poll      time.Duration // reads of remote cancels, approvals, takeovers, events
}

// errFenced is the cause a run is stopped with when its lease is gone.
var errFenced = errors.New("lease lost: the task was taken over by another run")

// errSelfFenced is the cause a run is stopped with when its own host
// could not heartbeat for most of a lease: like errFenced, nothing more is
// written for the run (another host may be about to sweep it).
var errSelfFenced = fmt.Errorf("this host could not reach the store to heartbeat for most of its lease: %w", errFenced)

// beatState is what the host knows of its own heartbeats. Times are this
// process's clock readings (monotonic), never the store's.
type beatState struct {
	mu sync.Mutex
	// sent is when the last successful heartbeat was sent (its stored
	// value is at most this), ok when it returned.
	sent, ok time.Time
	// since is when the first of the unbroken run of successful
	// heartbeats that ends at sent was sent.
	since time.Time
	// broken: the last heartbeat failed (or none succeeded yet).
	broken bool
	// fenced: the host stopped its runs since its last successful
	// heartbeat; lost are those runs, to end once the store answers.
	fenced bool
	lost   []lostRun
	// ending: an endLostRuns is under way.
	ending bool
	// peers is how many other hosts the last read of the hosts table
	// found.
	peers int
}

type lostRun struct {
	id    string
	runID int64
}

// succeeded records a heartbeat sent at sent that returned at ok, and
// returns the runs self-fencing stopped that are left to end, unless
// another call is already ending them (then it returns none).
func (b *beatState) succeeded(sent, ok time.Time, fs FleetSettings) []lostRun {
	b.mu.Lock()
	defer b.mu.Unlock()
	// A break — a failure, a fence, or a gap such as a pause of the whole
	// process — starts the unbroken run over.
	if b.broken || b.fenced || b.sent.IsZero() || sent.Sub(b.sent) > 2*fs.Heartbeat {
		b.since = sent
	}
	b.sent, b.ok, b.broken, b.fenced = sent, ok, false, false
	if b.ending || len(b.lost) == 0 {
		return nil
	}
	b.ending = true
	return slices.Clone(b.lost)
}

func (b *beatState) failed() {
	b.mu.Lock()
	b.broken = true
	b.mu.Unlock()
}

// maySweep reports whether the host may sweep at now: it has heartbeated
// without a break for a full lease and its last heartbeat is fresh.
func (b *beatState) maySweep(now time.Time, fs FleetSettings) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.broken && !b.fenced && !b.sent.IsZero() &&
		now.Sub(b.sent) < fs.Lease-fs.Heartbeat && b.ok.Sub(b.since) >= fs.Lease
}

// age is how long ago the last successful heartbeat was sent, or -1.
func (b *beatState) age(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent.IsZero() {
		return -1
	}
	return now.Sub(b.sent)
}

// StartFleet registers this host in the store and starts its fleet duties
// (heartbeat, self-fencing, sweep, lease watch) until Shutdown. A store
// opened without a host id is a lone, unnamed host: only the lease watch
// runs.
func (r *Runner) StartFleet(ctx context.Context, version string) error {
	named := r.store.HostID() != ""
	if named {
		sent := time.Now()
		if err := r.store.RegisterHost(ctx, version); err != nil {
			return err
		}
		r.beat.succeeded(sent, time.Now(), r.set.Fleet)
		r.set.Observer.HeartbeatSent(time.Now())
		r.goFleet(func() { r.heartbeatLoop(version) })
		r.goFleet(r.fenceLoop)
	}
	if r.store.CanNotify() {
		r.goFleet(func() {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-r.stopped; cancel() }()
			_ = r.store.Listen(ctx, r.set.Fleet.Heartbeat, r.watchLeases, func(err error) {
				r.set.Observer.ListenReconnected()
				r.log.Warn("fleet notifications lost; polling until they are back", "error", err)
			})
		})
	}
	r.startLiveness(r.set.Fleet.Heartbeat)
	r.StartQueue()
	r.goFleet(func() {
		beat := time.NewTicker(r.set.Fleet.Heartbeat)
		defer beat.Stop()
		for {
			select {
			case <-r.stopped:
				return
			case <-beat.C:
				if named {
					r.sweep()
				}
			}
		}
	})
	// The lease poll has a goroutine of its own: a heartbeat or sweep that
	// waits (a row lock, the store's retries) must not hold back a cancel
	// committed through another host when its notification is lost.
	r.goFleet(func() {
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
	})
	return nil
}

func (r *Runner) goFleet(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// heartbeatLoop refreshes this host's row every heartbeat interval. Each
// beat is bounded by the interval: a store that does not answer costs one
// beat, never the next.
func (r *Runner) heartbeatLoop(version string) {
	fs := r.set.Fleet
	t := time.NewTicker(fs.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-r.stopped:
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), fs.Heartbeat)
		err := r.hostBeat(ctx)
		if errors.Is(err, store.ErrNotFound) {
			err = r.store.RegisterHost(ctx, version)
		}
		cancel()
		if err != nil {
			r.beat.failed()
			r.log.Warn("host heartbeat not persisted", "host", r.store.HostID(), "error", err)
			continue
		}
		now := time.Now()
		r.set.Observer.HeartbeatSent(now)
		if lost := r.beat.succeeded(sent, now, fs); len(lost) > 0 {
			// Off this goroutine: ending them must not delay a heartbeat.
			r.goFleet(func() { r.endLostRuns(lost) })
		}
	}
}

// fenceLoop fences this host once its last successful heartbeat is
// Lease − Heartbeat old (see the arithmetic at the top of this file).
func (r *Runner) fenceLoop() {
	fs := r.set.Fleet
	t := time.NewTicker(fs.Heartbeat / 4)
	defer t.Stop()
	for {
		select {
		case <-r.stopped:
			return
		case <-t.C:
		}
		if age := r.beat.age(time.Now()); age >= fs.Lease-fs.Heartbeat && r.mayBeSwept() {
			r.selfFence(age)
		}
	}
}

// mayBeSwept reports whether another host could sweep this one: always on
// PostgreSQL, whose database any host may join; on SQLite only once another
// host was seen sharing the file. A lone SQLite host that cannot write its
// heartbeat (a full disk) keeps its runs, which nobody else can take.
func (r *Runner) mayBeSwept() bool {
	if r.store.CanNotify() {
		return true
	}
	r.beat.mu.Lock()
	defer r.beat.mu.Unlock()
	return r.beat.peers > 0
}

// selfFence stops every run this host holds, writing nothing more for
// them, once per outage.
func (r *Runner) selfFence(age time.Duration) {
	r.beat.mu.Lock()
	if r.beat.fenced {
		r.beat.mu.Unlock()
		return
	}
	r.beat.fenced = true
	r.mu.Lock()
	var ids []string
	for _, ru := range r.runs {
		if ru.ctx.Err() != nil {
			continue
		}
		r.beat.lost = append(r.beat.lost, lostRun{id: ru.id, runID: ru.runID})
		ids = append(ids, ru.id)
		ru.cancel(errSelfFenced)
	}
	r.mu.Unlock()
	r.beat.mu.Unlock()
	r.set.Observer.SelfFenced()
	r.log.Error("host fenced itself: no heartbeat reached the store for most of the lease; its runs are stopped before another host may sweep them, and nothing more is written for them",
		"host", r.store.HostID(), "last_heartbeat_age", age.Round(time.Millisecond), "lease", r.set.Fleet.Lease, "runs_stopped", ids)
	if len(ids) > 0 {
		r.notify()
	}
}

// endLostRuns ends the runs self-fencing stopped, now that the store
// answers: each as a sweep would have, unless one (or a cancel) did
// already. One the store refuses stays for the next heartbeat.
func (r *Runner) endLostRuns(lost []lostRun) {
	done := map[lostRun]bool{}
	for _, l := range lost {
		ctx, cancel := context.WithTimeout(context.Background(), r.set.Fleet.Heartbeat)
		msg := fmt.Sprintf("host %s could not reach the store for most of its lease and stopped the run", r.store.HostID())
		ok, err := r.store.LoseOwnRun(ctx, l.id, l.runID, msg, func(t store.Task) []store.NewEvent {
			p := EventPayload{Reason: string(store.ReasonHostLost)}
			return []store.NewEvent{newEvent(EventStepInterrupted, t, p), newEvent(EventTaskInterrupted, t, p)}
		})
		cancel()
		switch {
		case err != nil:
			r.log.Warn("run stopped by self-fencing not ended yet; retrying at the next heartbeat", "task", l.id, "run", l.runID, "error", err)
			continue
		case ok:
			r.log.Warn("run stopped by self-fencing ended: interrupted (host_lost); resume it explicitly", "task", l.id, "run", l.runID)
		}
		done[l] = true
	}
	r.beat.mu.Lock()
	r.beat.lost = slices.DeleteFunc(r.beat.lost, func(l lostRun) bool { return done[l] })
	r.beat.ending = false
	r.beat.mu.Unlock()
	r.notify()
}

// sweep interrupts the runs of lost hosts, once this host may (beatState).
// The wall heartbeat interval is charged, as start-up recovery does: the
// lost host may have run that long past its last persisted reading (the
// store caps it at the time since the task was last written).
func (r *Runner) sweep() {
	ctx := context.Background()
	if hosts, err := r.store.ListHosts(ctx); err == nil {
		now := time.Now()
		ages := make(map[string]time.Duration, len(hosts))
		peers := 0
		for _, h := range hosts {
			ages[h.ID] = now.Sub(h.HeartbeatAt)
			if h.ID != r.store.HostID() {
				peers++
			}
		}
		r.set.Observer.FleetHeartbeats(ages)
		r.beat.mu.Lock()
		r.beat.peers = peers
		r.beat.mu.Unlock()
	}
	if !r.beat.maySweep(time.Now(), r.set.Fleet) {
		return
	}
	ids, err := r.store.SweepLostHosts(ctx, r.set.Fleet.Lease, r.set.Heartbeat.Milliseconds(),
		func(t store.Task) []store.NewEvent {
			p := EventPayload{Reason: string(store.ReasonHostLost)}
			return []store.NewEvent{newEvent(EventStepInterrupted, t, p), newEvent(EventTaskInterrupted, t, p)}
		})
	if err != nil {
		r.log.Warn("lost-host sweep failed", "error", err)
		return
	}
	if len(ids) > 0 {
		r.set.Observer.RunsSwept(len(ids))
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
		if a.Status == store.ApprovalApproved && ApprovalKind(a) == ApprovalKindInput {
			// Approved here and nowhere else (answeredHere): resolve, which
			// holds the answer, hands it over after its commit. Answering
			// from the store in between would answer null.
			continue
		}
		// The first decision wins; the local path may have delivered it.
		// Any other approval resolved elsewhere carries no value: what
		// arrives here is a plain yes or a no.
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
	case l.Status == store.StatusInterrupted && l.Reason == store.ReasonUserPause:
		return errPaused
	case l.Status == store.StatusFailed && l.Reason == store.ReasonApprovalRejected:
		return errApprovalRejected
	case l.Status == store.StatusFailed && l.Reason == store.ReasonApprovalTimeout:
		return errApprovalExpired
	case l.Status == store.StatusInterrupted && l.Reason == store.ReasonHostLost:
		return errFenced
	}
	return nil
}
