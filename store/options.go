package store

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// Options tune how a Store is opened. The zero value is a safe default:
// synchronous FULL, a 5 s busy timeout, read-write, wall-clock time and the
// limits of DESIGN §9.
type Options struct {
	// Synchronous is SQLite's synchronous level in WAL mode: "FULL" (the
	// default: a committed step survives power loss) or "NORMAL" (faster; the
	// last commits may be lost on power loss, never corrupted).
	Synchronous string
	// BusyTimeout bounds how long a statement waits for another process's
	// lock before failing with SQLITE_BUSY. Default 5 s.
	BusyTimeout time.Duration
	// ReadOnly opens the file with mode=ro and applies no migrations (for
	// `taskhost inspect`). The file must already exist at exactly the schema
	// version this binary knows; every write method returns ErrReadOnly.
	ReadOnly bool
	// Now is the clock for every stored timestamp. Default time.Now; tests
	// inject a deterministic one.
	Now func() time.Time
	// Limits bound every variable-size value the store accepts.
	Limits Limits
	// ObserveCommit, when set, is called with the duration of every write
	// transaction's COMMIT that succeeded, up to its being durable (the
	// fsync of the write-ahead log that covers it, in FULL mode), for the
	// daemon's metrics. It must not block.
	ObserveCommit func(time.Duration)
	// ObserveRetry, when set, is called each time a write transaction is
	// run again after losing a race, with the failure's SQLSTATE (40P01 a
	// deadlock, 40001 a serialization failure, 25P03 a session ended for
	// idling in a transaction). It must not block.
	ObserveRetry func(sqlstate string)
	// ObserveFenced, when set, is called each time a write is refused
	// because its run is over (ErrFenced). It must not block.
	ObserveFenced func()
	// HostID names this host in a fleet sharing one store (see hosts.go):
	// every run this Store starts is leased to it, and recovery touches
	// only its own leases. Up to MaxHostID bytes of [A-Za-z0-9._-]; empty
	// is the unnamed single host.
	HostID string
	// WriteFault, when set, is asked around every write transaction's
	// COMMIT, for fault-injection tests: before it (committed false), an
	// error it returns rolls the transaction back and is what the write
	// reports; after a successful one (committed true), the write reports
	// the error although its changes are stored — a commit whose
	// acknowledgement was lost with the connection. Nil in production.
	WriteFault func(committed bool) error

	// dial, when set (by tests), makes OpenPostgres's connections, so
	// that a test can count the round trips of a write.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Limits bound every variable-size value the store accepts (DESIGN §9). A
// zero (or negative) field takes its default. Sizes are in bytes.
type Limits struct {
	Spec          int // task spec (goal + executor options), default 16384
	Summary       int // attempt summary, default 2000
	Message       int // task or attempt message, default 2000
	Checkpoint    int // sealed checkpoint envelope, default 256 KiB payload + 4 KiB envelope overhead
	Result        int // task result, default 64 KiB
	EventPayload  int // one event's JSON payload, default 1024
	EventsPerTask int // events kept per task (older ones are deleted), default 500
	StderrTail    int // plugin stderr tail kept for a crashed attempt, default 4096
	// WorkspaceBytes and WorkspaceFiles bound a task's stored workspace
	// (workspace.go): its files' total size, default 64 MiB, and their
	// number, default 65536.
	WorkspaceBytes int
	WorkspaceFiles int
}

// DefaultLimits returns the limits a zero Limits field stands for. It is a
// function, not a variable, so no caller can change another's defaults.
func DefaultLimits() Limits {
	return Limits{
		Spec:          16384,
		Summary:       2000,
		Message:       2000,
		Checkpoint:    256<<10 + 4<<10,
		Result:        64 << 10,
		EventPayload:  1024,
		EventsPerTask: 500,
		StderrTail:    4096,

		WorkspaceBytes: DefaultWorkspaceBytes,
		WorkspaceFiles: DefaultWorkspaceFiles,
	}
}

// withDefaults fills every unset field from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	pick := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return Limits{
		Spec:          pick(l.Spec, d.Spec),
		Summary:       pick(l.Summary, d.Summary),
		Message:       pick(l.Message, d.Message),
		Checkpoint:    pick(l.Checkpoint, d.Checkpoint),
		Result:        pick(l.Result, d.Result),
		EventPayload:  pick(l.EventPayload, d.EventPayload),
		EventsPerTask: pick(l.EventsPerTask, d.EventsPerTask),
		StderrTail:    pick(l.StderrTail, d.StderrTail),

		WorkspaceBytes: pick(l.WorkspaceBytes, d.WorkspaceBytes),
		WorkspaceFiles: pick(l.WorkspaceFiles, d.WorkspaceFiles),
	}
}

// normalize validates opts and fills in defaults.
func (o Options) normalize() (Options, error) {
	switch strings.ToUpper(o.Synchronous) {
	case "", "FULL":
		o.Synchronous = "FULL"
	case "NORMAL":
		o.Synchronous = "NORMAL"
	default:
		return o, fmt.Errorf("%w: synchronous must be FULL or NORMAL, not %q", ErrInvalid, o.Synchronous)
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Limits = o.Limits.withDefaults()
	if err := CheckHostID(o.HostID); o.HostID != "" && err != nil {
		return o, err
	}
	return o, nil
}
