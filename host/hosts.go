package host

import (
	"context"
	"time"

	"github.com/taskhost/taskhost/store"
)

// Host states as `taskhost hosts` shows them.
const (
	// HostLive: the host's heartbeat is at most a lease old.
	HostLive = "live"
	// HostLost: its heartbeat is older than the lease; the next sweep of a
	// live host interrupts its tasks (host_lost).
	HostLost = "lost"
)

// FleetHost is one host of the store as this host sees it.
type FleetHost struct {
	store.HostLoad
	// HeartbeatAge is by this host's clock, never negative.
	HeartbeatAge time.Duration
	State        string // HostLive or HostLost
	Self         bool   // this host
}

// Fleet is the hosts sharing this host's store.
type Fleet struct {
	Hosts []FleetHost
	Self  string        // this host's id
	Lease time.Duration // [fleet] lease
	// Shared says the store can be shared (PostgreSQL); on SQLite the
	// list is this host alone.
	Shared    bool
	Truncated bool // more than store.MaxHostLoads hosts
}

// Hosts lists the hosts sharing the store, by id, with the live tasks each
// owns; a host is lost once its heartbeat is older than the lease, which is
// when a sweep may take its tasks.
func (r *Runner) Hosts(ctx context.Context) (Fleet, error) {
	loads, more, err := r.store.HostLoads(ctx, store.MaxHostLoads)
	if err != nil {
		return Fleet{}, err
	}
	f := Fleet{Self: r.store.HostID(), Lease: r.set.Fleet.Lease, Shared: r.store.CanNotify(), Truncated: more}
	now := time.Now()
	for _, l := range loads {
		h := FleetHost{HostLoad: l, HeartbeatAge: max(now.Sub(l.HeartbeatAt), 0), State: HostLive, Self: l.ID == f.Self}
		if h.HeartbeatAge > f.Lease {
			h.State = HostLost
		}
		f.Hosts = append(f.Hosts, h)
	}
	return f, nil
}

// TaskHost is the host that holds principal's task id's run, or held its
// last one ("" if it never ran).
func (r *Runner) TaskHost(ctx context.Context, principal, id string) (string, error) {
	l, err := r.store.TaskLease(ctx, principal, id)
	return l.Host, err
}
