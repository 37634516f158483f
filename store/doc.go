// Package store is taskhost's only store: tasks, their step attempts and
// their events in one SQLite file (DESIGN §2, §3, §5, §7, §9).
//
// What it guarantees, whatever its callers do:
//
//   - Every status change is one compare-and-set UPDATE checked against the
//     state machine (Legal), so of two racing changes exactly one wins and the
//     loser gets a typed error (*TransitionError, ErrNotFound).
//   - Every multi-row change — a claim and its step charge, an outcome with
//     its checkpoint, counters and status, any change with its events — is
//     one IMMEDIATE transaction on a single writer connection: nothing is ever
//     half-written.
//   - Budgets never exceed their limits (the schema checks it too) and wall
//     time never goes backwards.
//   - Every call is scoped to a principal; another principal's task is
//     indistinguishable from a missing one.
//   - Every variable-size value is bounded (Limits) and checked before the
//     transaction starts.
//   - Several hosts may share one store (hosts.go): each run is leased to
//     the host that started it, its run id is the lease epoch, and every
//     write of a run is fenced by it (ErrFenced), so a host that lost its
//     lease never overwrites a newer run. Recovery and shutdown touch only
//     this host's leases; SweepLostHosts interrupts a lost host's (host_lost).
//   - Open fails closed, with an *OpenError that says what to do, on a file
//     that is missing, read-only, not a taskhost store, corrupt, or of a
//     newer schema, and never writes to a file it refuses.
package store
