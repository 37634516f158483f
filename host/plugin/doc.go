// Package plugin is the executor seam and its one implementation: executors
// as out-of-process go-plugin gRPC plugins.
//
// # The seam
//
// The host's Runner sees only the plain types of executor.go: a Launcher
// starts an Executor process of a kind, serving it a Services value; the
// Executor answers Describe and Step with a Description and a StepResult and
// reports how its process ended (Exited, ExitStatus, StderrTail). Services
// refuse with the typed errors of errors.go; no generated protobuf type
// crosses the seam. The gRPC conversion lives in two adapter files alone:
// client.go (the Executor client) and services_grpc.go (the HostServices
// server, where serviceStatus maps every refusal to a gRPC status and
// ErrorInfo reason once) with stream.go, which types a failed step for the
// Runner. The package imports neither the host nor the
// store: the host imports it, and turns its store's errors into these.
//
// # Registration and pins
//
// A Registry knows each configured kind (a PluginSpec) and the verdict of its
// preflight: Register opens the binary once, checks it is an executable
// regular file and, when pinned, hashes that open file against the pinned
// SHA-256; the trampoline then execs the very file descriptor that was
// hashed, so swapping the file or a symlink after the check cannot run an
// unpinned build. A pinned script is refused (its interpreter would read it
// again by path). The probe completes the handshake and checks Describe: the
// kind it names, the protocol version, at least one checkpoint schema, and
// a "preflight" runtime entry of "ok" if present. Any failure makes the kind
// unavailable with an *UnavailableError naming the check ("binary",
// "checksum", "handshake", "start_timeout", "describe", "protocol",
// "preflight", "confinement", "user", "disabled"); it matches
// ErrExecutorUnavailable. Check re-runs the preflight only when the binary's
// stat stamp (device, inode, size, mtime, ctime) changed since the last
// verdict; Reload probes a new set of kinds and swaps all verdicts in at
// once, leaving running plugins on the binary they started from.
//
// # Launch
//
// Every plugin process is started through the trampoline (by default the
// running binary, whose main calls confine.Main first): Landlock, seccomp,
// no capabilities, rlimits and an optional unprivileged user, as the kind's
// Confinement says. Where the kernel lacks Landlock the plugin starts less
// confined with a warning, or is refused when RequireConfinement is set. Its
// environment is the allow-list (PATH, LANG, LC_ALL, TZ) plus HOME and TMPDIR
// set to a private directory of its own, removed when it stops. It runs in
// its own process group with a parent-death signal, started from one
// goroutine locked to its OS thread for the Registry's life (the forker), so
// the runtime never retires the thread a live plugin's death signal is tied
// to. The handshake is go-plugin's over a unix socket under the socket dir
// (swept at NewRegistry; its path is capped so the socket path fits 108
// bytes) within StartTimeout. A step is one RunStep stream on the
// connection the host dialled (stream.go, internal/steprpc): the host sends
// the step, answers the plugin's host-service calls on the same stream and
// takes its result, so the plugin never connects anywhere itself and no
// go-plugin broker or yamux session sits on the data path. A failed stream
// reaches the Runner typed: ErrConnectionLost, ErrProtocol (a crash of the
// plugin), a *StepCallError, or the context's error.
//
// # Pre-started processes
//
// A kind whose PluginSpec.Prestart is above 0 keeps that many processes
// started ahead of need (pool.go), each by the launch above — its own pool
// uid, held while it waits, its confinement and handshake — serving no one
// (every host service refused) until a Launch takes it: the task's services
// and log labels are bound then, and it serves that one task and is
// stopped with the run, never reused. Nothing of a plugin's confinement
// names a task, so a pooled process is confined as one started for the
// task. It is handed out only under the kind's current verdict (a
// generation bumped by every Register, re-check and Reload, which also
// drain the pool) while its binary's stat stamp is the one before and
// after its start, and only once it answers a Describe; a stale, dead or
// silent one is stopped, and the Launch starts a process of its own, which
// refuses a pin mismatch as always. One that exits while it waits is
// replaced (three such deaths in a row stop the immediate replacement).
// At most two pooled starts run at once, the pool leaves
// PluginOptions.UIDReserve uids free, and Close stops every waiting
// process before anything else; a killed daemon's pooled processes die by
// their parent-death signal, as every plugin does. PoolStatus counts what
// each pool served and discarded.
//
// # Crash detection and stop
//
// The process is the host's own go-plugin runner: its death is known from
// the wait status the moment the leader exits (Exited closes), not when every
// holder of its stderr has let go, so a grandchild keeping the pipe open
// cannot delay a crash verdict. StderrTail is the last StderrLines lines
// (each cut at 512 bytes, 4000 bytes in all), led by the first panic or
// fatal error line when the trace below pushed it out; once the process has
// exited it waits at most 50 ms for lines still in the pipe. Stop
// sends SIGTERM to the process group, waits StopGrace for the leader, then
// SIGKILLs the group, grandchildren included; it is safe to call twice.
// Close waits a bounded time for go-plugin's clean-up of stopped plugins.
//
// # Stderr forwarding
//
// Every stderr line of a plugin reaches the host log with the executor, task,
// run and attempt it belongs to (WithLaunchLabels carries the task and run
// into Launch): an hclog JSON line at its own level with at most 16 of its
// fields (one named like a host label is renamed, so a plugin cannot pass
// for another task), a plain line at INFO or the level its "[WARN]"-style
// prefix names, ERROR from a "panic:" or "fatal error:" line on. A
// line is cut at 2048 bytes; beyond a burst of 100 lines and 50 a second,
// lines are dropped and counted, the count logged when forwarding resumes
// or the stream ends. yamux's ERROR lines about the connection the host just
// closed to stop a plugin are logged at DEBUG.
package plugin
