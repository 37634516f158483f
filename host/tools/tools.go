// Package tools is the host-side tool registry (DESIGN.md §4, §6, §9).
//
// Executors never run tools themselves. They ask the host through the
// CallTool host service; the host looks the tool up in a [Registry], checks
// its [Policy] (whether it is enabled, whether it needs an approval — the
// approval itself is the caller's business), and runs it with [Registry.Call],
// which enforces the tool's timeout and bounds every argument and result.
//
// The built-in tools are:
//
//	workspace.read  {path, offset?, limit?}   → {"content", "size"[, "encoding"]}
//	workspace.write {path, content, append?}  → {"written"}
//	workspace.list  {path?}                   → {"entries": [{"name","type","size"}], "truncated"}
//	shell.run       {command, timeout_seconds?} → {"exit_code", "output", "truncated", "output_bytes"}
//	time.sleep      {seconds}                 → {"slept"}
//
// Every task has its own workspace directory, <workspace root>/<task id>,
// created on first use with mode 0700. Workspace paths are relative to it;
// a path that is absolute, has a ".." segment or a NUL byte, or that leads
// out of the workspace through a symlink is refused with an [*ArgError].
//
// Call reports two kinds of failure, and the difference matters to the
// caller:
//
//   - a [Result] with IsError set is a failure of the tool's work that the
//     model should see and may react to (exit code != 0, file not found);
//   - a Go error is a failure the host must record: [ErrUnknownTool],
//     [ErrDisabled], [*ArgError], [ErrTimeout], [ErrInvalidEnv], a context
//     error when the caller's context ends, or an unexpected system error.
//
// [Fingerprint] and [Summarize] serve the effect ledger (DESIGN.md §6): the
// fingerprint identifies a call for replay, the summary is the ledger's only
// trace of the arguments, so it never contains argument values. [Describe]
// is what an approver reads — the arguments themselves, bounded and escaped —
// and goes only into the approval record of the task's owner.
//
// shell.run commands run confined (Landlock to their workspace, no
// capabilities; see shellconfine.go) and contained (a cgroup of their own,
// or a tracked session; see contain.go). [Registry.Close] kills what is
// still running when the host stops.
package tools

import (
	"errors"
	"strconv"
	"time"
)

// Limits. Each is enforced by Call and has a test at the limit and one past it.
const (
	// MaxArgsBytes bounds the JSON arguments of every tool except
	// workspace.write.
	MaxArgsBytes = 64 << 10
	// MaxWriteArgsBytes bounds workspace.write's arguments. MaxArgsBytes
	// alone would make MaxWriteBytes unreachable, so the write tool gets
	// room for its content twice over (JSON escapes newlines, quotes and
	// backslashes as two bytes) plus MaxArgsBytes for everything else. It
	// stays below the 4 MiB gRPC message limit (DESIGN.md §9).
	MaxWriteArgsBytes = 2*MaxWriteBytes + MaxArgsBytes
	// MaxPathBytes bounds a workspace path argument.
	MaxPathBytes = 512
	// MaxWriteBytes bounds the content of one workspace.write.
	MaxWriteBytes = 1 << 20
	// MaxWorkspaceBytes bounds the total size of the regular files in a
	// task's workspace, as checked by workspace.write. Under a root daemon
	// a shell.run command's writes are bounded by a filesystem of that
	// size too (disk.go); elsewhere only by max_file_mb per file.
	MaxWorkspaceBytes = 64 << 20
	// MaxCommandEntries bounds the files, directories and deletions one
	// shell.run command may make in its workspace (its tmpfs's inodes;
	// see disk.go).
	MaxCommandEntries = 1 << 16
	// MaxReadBytes bounds the content one workspace.read returns; larger
	// files are read in pieces with offset and limit.
	MaxReadBytes = 256 << 10
	// MaxListEntries bounds the entries one workspace.list returns.
	MaxListEntries = 1000
	// MaxShellOutputBytes bounds the combined stdout and stderr shell.run
	// returns, marker included; the tail is kept because that is where
	// errors usually are.
	MaxShellOutputBytes = 64 << 10
	// MaxCommandBytes bounds a shell.run command.
	MaxCommandBytes = 8 << 10
	// MaxSummaryBytes bounds the text Summarize returns.
	MaxSummaryBytes = 120
	// MaxIdempotencyKeyBytes bounds Env.IdempotencyKey.
	MaxIdempotencyKeyBytes = 128
	// keysKept is how many idempotency keys a file remembers (its last
	// keyed writes).
	keysKept = 16
	// time.sleep's seconds are bounded by the tool's own timeout (Policy).
)

// Spec describes a tool to a model.
type Spec struct {
	Name        string
	Description string
	Parameters  string // JSON schema of the arguments object
}

// Policy is what the host must check before and while running a tool.
type Policy struct {
	Enabled       bool
	NeedsApproval bool          // the caller obtains the approval before Call
	Timeout       time.Duration // Call stops the tool when it is reached
}

// Env is the task a call runs for.
type Env struct {
	// TaskID names the task; it must match [a-z0-9_]{1,64}.
	TaskID string
	// Workspace is the absolute directory of this task's workspace. Call
	// always derives it from TaskID (see Registry.Workspace), so a caller
	// cannot point a task at another directory: when set, it must equal
	// the derived directory. The directory is created on first use, 0700.
	Workspace string
	// IdempotencyKey, when set, makes the call idempotent: a call with a
	// key the tool already applied does nothing more and says so. Only a
	// tool that honours keys (Registry.HonoursKey) accepts one; Call
	// refuses it on any other. At most MaxIdempotencyKeyBytes.
	IdempotencyKey string
}

// Result is what a tool that ran reports.
type Result struct {
	// Output is a JSON object, bounded by the limits of this package.
	Output string
	// IsError says the tool ran and reports a failure to the model, e.g.
	// an exit code != 0 or a file that does not exist; Output is then
	// {"error": "..."} (or, for shell.run, the usual object).
	IsError bool
}

// Errors of Call. They are wrapped; test them with errors.Is and errors.As.
var (
	// ErrUnknownTool: no tool of that name exists.
	ErrUnknownTool = errors.New("tools: unknown tool")
	// ErrDisabled: the tool exists but the configuration disables it.
	ErrDisabled = errors.New("tools: tool is disabled")
	// ErrTimeout: the tool's timeout (its policy, or the shorter
	// timeout_seconds a shell.run asked for) was reached and the tool was
	// stopped. Whatever it did before that may have taken effect.
	ErrTimeout = errors.New("tools: tool timed out")
	// ErrInvalidEnv: the Env is not usable (bad task id, or a Workspace
	// that is not the task's).
	ErrInvalidEnv = errors.New("tools: invalid task environment")
	// ErrClosed: the registry was closed (the host is stopping); a
	// command that was running then has been killed.
	ErrClosed = errors.New("tools: registry closed")
)

// ArgError reports arguments a tool refuses: malformed JSON, an unknown or
// missing field, a value of the wrong type or over a limit. Message names the
// limit where there is one and never repeats the content of a string
// argument (a path, a command), so it is safe to show to the model and to log.
type ArgError struct {
	Tool    string
	Field   string // the argument; empty when it is about the arguments as a whole
	Message string
}

func (e *ArgError) Error() string {
	if e.Field == "" {
		return "tools: " + e.Tool + ": arguments: " + e.Message
	}
	return "tools: " + e.Tool + ": argument " + strconv.Quote(e.Field) + ": " + e.Message
}

// timeoutError is the cancellation cause of a context whose tool timeout
// ran out. Tools return context.Cause(ctx) when their context ends, so a
// timeout surfaces as ErrTimeout with the duration that was hit.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string { return "timed out after " + e.after.String() }
func (e *timeoutError) Unwrap() error { return ErrTimeout }
