package config

import "fmt"

// Fleet is the [fleet] section: how this host takes part in a fleet of hosts
// sharing one store (docs/operations.md, "Running a fleet").
type Fleet struct {
	// HostID names this host in the store: 1..64 bytes of [A-Za-z0-9._-].
	// Empty (the default) uses the id stored in the data dir, created on
	// first start.
	HostID string `toml:"host_id"`
	// HeartbeatSeconds is how often the host refreshes its row and sweeps
	// for lost hosts: 1..(lease_seconds-1)/2, default 5.
	HeartbeatSeconds int `toml:"heartbeat_seconds"`
	// LeaseSeconds is how old a host's heartbeat may grow before its
	// running tasks are interrupted (host_lost) by another host: more than
	// twice heartbeat_seconds (one missed heartbeat is not a loss), at most
	// 3600; default 30.
	LeaseSeconds int `toml:"lease_seconds"`
	// PollMillis is how often the host reads the store for changes other
	// hosts made to its runs (a cancel, an approval, a takeover) and for
	// watches: 10..5000, default 250.
	PollMillis int `toml:"poll_millis"`
}

func defaultFleet() Fleet {
	return Fleet{HeartbeatSeconds: 5, LeaseSeconds: 30, PollMillis: 250}
}

// maxLeaseSeconds bounds fleet.lease_seconds: an hour without a host's
// heartbeat is already an outage.
const maxLeaseSeconds = 3600

func (f Fleet) validate(ps *problems) {
	if f.HostID != "" {
		if msg := hostIDProblem(f.HostID); msg != "" {
			ps.add("fleet.host_id", "fleet.host_id = %s: %s", quote(f.HostID), msg)
		}
	}
	// The heartbeat owns the rule between the two: a lease must outlast
	// two heartbeats, so one missed beat is never taken for a lost host.
	ps.intRange("fleet.lease_seconds", f.LeaseSeconds, 3, maxLeaseSeconds)
	if f.LeaseSeconds >= 3 && f.LeaseSeconds <= maxLeaseSeconds {
		if hi := (f.LeaseSeconds - 1) / 2; f.HeartbeatSeconds < 1 || f.HeartbeatSeconds > hi {
			ps.add("fleet.heartbeat_seconds", "fleet.heartbeat_seconds = %d: must be between 1 and %d (less than half of fleet.lease_seconds = %d)",
				f.HeartbeatSeconds, hi, f.LeaseSeconds)
		}
	} else {
		ps.intRange("fleet.heartbeat_seconds", f.HeartbeatSeconds, 1, (maxLeaseSeconds-1)/2)
	}
	ps.intRange("fleet.poll_millis", f.PollMillis, 10, 5000)
}

// hostIDProblem says what is wrong with a host id, or "".
func hostIDProblem(id string) string {
	if len(id) > 64 {
		return fmt.Sprintf("is %d bytes: must be 1..64", len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("byte %d is %q: only letters, digits, '.', '_' and '-' are allowed", i, c)
		}
	}
	return ""
}
