// Package store is taskhost's only store: tasks, their step attempts and
// their events, in one SQLite file (Open, the default) or in one PostgreSQL
// database that several hosts may share (OpenPostgres) (DESIGN §2, §3, §5,
// §7, §9).
//
// What it guarantees, whatever its callers do, on either engine:
//
//   - Every status change is one compare-and-set UPDATE checked against the
//     state machine (Legal), so of two racing changes exactly one wins and the
//     loser gets a typed error (*TransitionError, ErrNotFound) — also when
//     the two come from two hosts on one PostgreSQL database.
//   - Every multi-row change — a claim and its step charge, an outcome with
//     its checkpoint, counters and status, any change with its events — is
//     one transaction: nothing is ever half-written. On SQLite it is
//     IMMEDIATE on a single writer connection. On PostgreSQL it is READ
//     COMMITTED, made correct by row locks (pgDialect): every path locks
//     the task's row first — by its compare-and-set on status and run id,
//     or by lockTask before it reads the task's attempts, effects or
//     approvals — so what it read cannot change before it commits, and
//     two writers of one task wait for each other in one lock order
//     instead of deadlocking; inserts rest on unique keys; the lost-host
//     sweep locks its candidates in seq order and passes over those
//     another transaction holds (SKIP LOCKED). The host heartbeat is one
//     autocommit UPDATE of the host's own row on a connection of its own,
//     which nothing else locks. A transaction that still loses a race (a
//     deadlock, 40P01; a session ended for idling, 25P03) is run again
//     from the start, up to 10 times with a jittered backoff, each retry
//     counted by SQLSTATE (Options.ObserveRetry), then reported as an
//     *UnavailableError ("busy"); none should happen in normal operation.
//   - On SQLite at synchronous=FULL a write returns only once its commit
//     is on disk, and a read returns nothing that is not: the commit writes
//     the log and one fsync of it, outside the writer's lock, makes every
//     commit before it durable (durable.go). What a step waits for is its
//     turn on the single writer (at most the group being written when it
//     queued), its own group's statements and COMMIT, then at most the
//     fsync already under way and the next one, which it shares with every
//     commit that landed meanwhile; the next group's statements run during
//     that fsync instead of after it. A read waits, after reading, for the
//     fsync of every commit it could have seen. A failed fsync fails the
//     write that waited for it and every later write and read with an
//     *UnavailableError ("I/O error") until the store is reopened: the
//     kernel may have dropped the pages it could not write.
//   - On SQLite, the steps of several tasks that finish at once
//     (FinishAndClaim) share one commit:
//     up to 64 of them run in one write transaction, each in its own
//     savepoint. Each stays its own compare-and-set: one that is refused is
//     rolled back to its savepoint and gets the same error it would get
//     alone, while the others are stored; a failed commit fails every
//     other member; and if the shared transaction is lost (a savepoint cannot be
//     rolled back or released), every member runs again alone, so none is
//     reported stored from a transaction that was rolled back. A step that
//     has joined a group is written whatever its caller's context does
//     (an interrupt would roll back the others), and its caller gets the
//     real result. PostgreSQL keeps one transaction per write: its pool
//     already runs writes side by side, and one member's lock wait would
//     hold up a whole group. There a step's common case (pgstep.go) is one
//     round trip: a pgx batch, run as one implicit transaction, of the
//     task row's lock and one statement whose CTEs do each concern of the
//     step; it reads what it changes only under that lock, so it is the
//     same compare-and-set as the general path, which it leaves every
//     refusal to explain. A batch whose connection is lost before its lock
//     statement answered is run again (nothing of it can have committed);
//     one lost later is reported unavailable, its outcome unknown.
//   - Budgets never exceed their limits (the schema checks it too) and wall
//     time never goes backwards.
//   - Every call is scoped to a principal; another principal's task is
//     indistinguishable from a missing one.
//   - Every variable-size value is bounded (Limits) and checked before the
//     transaction starts.
//   - A task keeps the newest Limits.EventsPerTask of its events, and
//     after any write of them holds at most EventsPerTask+32. Every writer
//     but the step path trims a task's events back to the limit as soon as
//     they pass it; the step path (FinishAndClaim) lets them run up to 32
//     past it before trimming, so that a long task pays for a trim every
//     dozen or so steps rather than on each. A count of the task's events,
//     kept in its row in the same transaction as every insert and trim of
//     them, tells a writer when, so a task under its limit pays nothing (a
//     lowered limit reaches a task at its next write).
//   - A failure outside the request — a full disk, an I/O error, a
//     PostgreSQL server gone, restarting, out of connections or too busy —
//     is an *UnavailableError (errors.Is ErrUnavailable) naming its class,
//     with nothing written; the same write may succeed later. A read that
//     meets a connection the server ended runs again on another (it holds
//     nothing), and where the server stays gone it too is unavailable.
//   - Several hosts may share one store (hosts.go): each run is leased to
//     the host that started it, its run id is the lease epoch, and every
//     write of a run is fenced by it (ErrFenced), so a host that lost its
//     lease never overwrites a newer run. Recovery and shutdown touch only
//     this host's leases; SweepLostHosts interrupts a lost host's (host_lost).
//   - An unsettled tool effect — indeterminate, or observed without a kept
//     result in an attempt whose outcome did not commit — is a durable state
//     of the ledger (effects.resolution): it is set in the statement that
//     makes the effect so, and it stays until ResolveEffect, a
//     compare-and-set with its events, records retry_authorized or
//     abandoned and who. UnsettledEffects finds the unresolved ones a call
//     would re-run, in any later attempt, run or host of the task, so the
//     host's gate never depends on one attempt's memory; a completed
//     attempt settles only what it observed itself.
//   - A task's workspace as of its last committed step is in the store
//     (workspace.go): a step's changed files and removed paths are
//     written in the transaction of its outcome (FinishAttempt.Workspace),
//     so the stored workspace is always exactly some committed step's; a
//     crashed attempt's files never reach it. The totals are kept from the
//     rows a step replaces, so a step costs statements for its changed
//     files only, and past Limits.WorkspaceBytes or WorkspaceFiles the
//     whole step is refused (*WorkspaceLimitError), nothing written. A
//     step that changed nothing keeps PostgreSQL's one-batch path.
//   - Open fails closed, with an *OpenError that says what to do, on a file
//     that is missing, read-only, not a taskhost store, corrupt, or of a
//     newer schema, and never writes to a file it refuses. OpenPostgres
//     does the same for a database that cannot be reached, holds another
//     application's tables, or has a newer schema; its errors never repeat
//     the DSN's password.
//
// The engines differ only inside the package, and no statement's text is
// rewritten between them: the statements are written once in the SQL both
// take, with "$N" parameters (both bind them by number), except the few
// written per engine (engineSQL: greatest and least on PostgreSQL for
// SQLite's two-argument max and min, SQLite's INDEXED BY hint; the
// dialect's row locks; PostgreSQL's one-round-trip step, pgstep.go). Each
// engine has its own migrations, embedded SQL files
// (migrations/sqlite/NNNN_name.sql, recorded in PRAGMA user_version;
// migrations/postgres/NNNN_name.sql, recorded in the
// taskhost_schema_version table and applied under an advisory lock so
// that hosts starting together migrate once; its v1 is SQLite's v4). The
// store creates nothing in a PostgreSQL schema but its tables, their
// indexes and sequences.
//
// What differs, and is so by design:
//
//   - SQLite only: the integrity check at open (PRAGMA quick_check), the
//     file trust checks (owner, symlinks, companions), Options.Synchronous
//     and BusyTimeout, WAL, and Backup (VACUUM INTO a file). A PostgreSQL
//     store is backed up with pg_dump; Backup refuses it.
//   - PostgreSQL only: the connection pool (PoolOptions). Text it is given
//     that PostgreSQL's text type cannot hold — NUL, invalid UTF-8, as a
//     plugin's stderr may carry — is stored with each such byte replaced
//     ('?', NUL by a space), at the same length; SQLite stores the bytes.
//   - A task's events commit in the order of their sequence numbers on both
//     (on PostgreSQL the task's row is locked before they are numbered), so
//     a watcher's "after seq" cursor misses none; numbers of different
//     tasks' events may commit out of order there, which no reader relies on.
package store
