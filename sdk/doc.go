// Package sdk is how an executor is written for taskhost.
//
// An executor is a separate program that the host starts as a
// hashicorp/go-plugin plugin over gRPC, one process per running task. Its
// main function builds an Executor and hands it to Serve:
//
//	func main() {
//		sdk.Serve(myExecutor{})
//	}
//
// The host calls Step once per step of the task, never concurrently. During
// a step the executor reaches the outside world only through the Host it is
// given (model calls, tool calls, approvals, progress notes); the host counts,
// gates and records every such call. The executor holds no credentials and
// keeps its state between steps only in the Checkpoint it returns.
//
// Rules of the road:
//
//   - Print nothing to stdout before Serve: go-plugin's handshake is a line on
//     stdout and anything before it breaks start-up. Log with Logger: its
//     JSON lines on stderr land in the host's log at their level, with the
//     task, run, attempt and executor (bounded in length and rate).
//   - Honour ctx in Step. Cancelling the task cancels it, and the host kills
//     the process shortly after if Step does not return.
//   - A panic in Step is not recovered: it crashes the plugin, and the host
//     records the attempt as crashed with the panic from stderr.
//   - On SIGTERM (how the host stops a plugin) and when the host process
//     dies, the running step's context is cancelled and the plugin exits
//     once Step returns, or after a short grace. An orphaned executor never
//     keeps running; it exits with status 3.
package sdk
