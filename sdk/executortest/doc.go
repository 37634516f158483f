// Package executortest is the conformance kit for taskhost executors. An
// executor author calls Run from a go test against the executor binary as
// built:
//
//	func TestConformance(t *testing.T) {
//		executortest.Run(t, executortest.Options{
//			Binary: bin, // built by the test, e.g. in TestMain
//			Kind:   "checklist",
//			Spec: func(scenario string) map[string]any {
//				switch scenario {
//				case executortest.ScenarioComplete:
//					return map[string]any{"goal": "g", "checklist": map[string]any{"items": []string{"a", "b", "c"}}}
//				// ...
//				}
//				return nil
//			},
//		})
//	}
//
// # How it tests
//
// The kit drives a real host the way a user does, and nothing else: it runs
// the taskhost binary (Options.TaskhostBin, else $TASKHOST_BIN, else
// "taskhost" on PATH) as `taskhost run --json` on a fresh data dir per
// check, with a generated config that registers the binary as
// [executors.KIND] pinned by its SHA-256, and reads the outcome with
// `taskhost inspect --json`. It never links the host or the store. A
// built-in kind (legacy, machinespirit) cannot be registered in a config:
// for those the kit gives each host a directory with a link of taskhost and
// the binary beside it as taskhost-executor-KIND, where the host finds it.
//
// The generated config sets [limits] plugin_stop_grace_seconds to 5, longer
// than the host's default of 2 s, so that an executor that ignores a
// cancelled step shows instead of being hidden by the host's kill; Options.Config
// is appended to it and may add any other section ([model], [tools."NAME"],
// [tasks], ...). The kit approves every approval a task asks for
// (--approve-all), and answers its input questions with Options.Inputs
// (`taskhost run --input-values`; else null). Checks run one after another, never in parallel, so
// that their timings mean something.
//
// # The checks
//
// Each check is a subtest named after its Check constant; a failure says
// what the executor must change. Options.Skip opts out of a check, with a
// reason.
//
//   - describe: the binary starts as a plugin and its Describe reports
//     Options.Kind, a version, and at least one checkpoint schema.
//   - complete: the complete scenario completes, in at least 2 steps (the
//     first runs without a checkpoint, later ones with one), each attempt
//     completed, the last with outcome complete.
//   - cancel: SIGINT, then SIGTERM, to the foreground taskhost during the
//     slow scenario's first step: the task must end interrupted
//     (host_shutdown), and the step must return once its context is
//     cancelled. The kit reports how long the executor process and taskhost
//     took to exit; it fails when the SDK reports that Step never returned,
//     or when the process outlives the host's stop grace (2 s) plus a
//     margin of 1 s.
//   - result_too_large: the oversized scenario's result over 64 KiB fails
//     the task with result_too_large.
//   - step_budget: the long scenario with --max-steps 2 fails the task with
//     step_budget_exhausted after exactly 2 completed steps.
//   - crash_resume: the kit SIGKILLs the executor process (found in /proc as
//     the child of taskhost whose argv[0] is the binary) once the crash
//     scenario's second step has started: the task must be interrupted
//     (executor_crashed, "signal killed"), and `taskhost run --resume ID`
//     must complete it; no side effect ran twice (see Effects).
//   - host_crash_resume: the kit SIGKILLs taskhost itself during the crash
//     scenario's second step: the executor process must die with it, and
//     `taskhost run --resume ID` must recover the task (interrupted,
//     host_restart) and complete it; no side effect ran twice.
//   - checkpoint_round_trip: the crash scenario run uninterrupted must take
//     as many completed steps as the killed and resumed run did, which
//     shows that the resumed step carried on from its checkpoint.
//   - schema_upgrade: with Options.OldBinary, a task run by the old build is
//     interrupted after its first step and resumed by the new one, which must
//     complete it; the new build must accept the schema the old one writes.
//     There is no black-box way to seed the store with a checkpoint (the host
//     seals checkpoints with a per-data-dir key), so without an old build the
//     check is skipped and left to a manual test. BuildAt builds the old
//     release from a git tag or commit of the repository the test runs in.
//   - determinism (optional): the deterministic scenario, run twice, gives
//     the same steps (outcome and summary) and the same result.
//
// # Preconditions
//
// A check that interrupts a slow step means something only when the step
// is still running when the kit's signal lands, so the kit refuses a
// scenario that cannot make its check meaningful instead of passing or
// flaking by chance: the check fails with a message that starts
// "precondition:" and names the scenario to change in Options.Spec. The
// slow step (the slow scenario's first, the crash scenario's second) must
// still run 200 ms after the kit saw it start; the kit's SIGKILL must land
// in step 2; and the crash task must take at least 3 steps, killed and
// resumed as well as uninterrupted.
//
// # Effects, results and questions
//
// After each crash and resume (crash_resume, host_crash_resume,
// schema_upgrade) the kit reads the task's effect ledger with `taskhost
// inspect --effects --json ID` and counts, per step and per tool, the runs
// the host dispatched and observed (not replayed) over all the step's
// attempts against the calls the attempt that completed the step made, its
// replays included. More runs than calls is an effect a killed attempt made
// that its re-run made again instead of replaying it, and fails the check,
// naming the crash, the scenario, the step, each run and the counts. A
// replay counts once, a call marked Idempotent counts once per key, a call
// cut off in flight is in doubt and not counted, and the tools that change
// nothing (workspace.read, workspace.list, time.sleep, task.list,
// task.status) are left out.
//
// Options.Result checks the result of every completed task of a scenario,
// uninterrupted and after each crash and resume (ResultEquals compares by
// JSON meaning). Options.Inputs scripts the answers to a scenario's input
// questions, in order; a resume gets the answers its task has not used
// yet, and a question past the script is rejected, failing the check with
// the question quoted.
//
// # Seeding the workspace
//
// Options.Files gives the files to place in a scenario's workspace before
// its first step (`taskhost run --file`); the kit checks every scenario's
// files against the host's limits before it runs any check.
//
// The kit needs Linux (it finds the executor process in /proc).
package executortest
