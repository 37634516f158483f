package executortest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/sdk/executortest"
)

// binDirEnv passes the binaries TestMain built to the re-executed test
// binary of TestKitCatchesFlaws, which then need not build them again.
const binDirEnv = "EXECUTORTEST_BIN_DIR"

// helperEnv names the flaw case a re-executed test binary runs.
const helperEnv = "EXECUTORTEST_HELPER_CASE"

// binDir holds taskhost and the executors under test, built by TestMain.
// It is written once, before any test runs.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if dir := os.Getenv(binDirEnv); dir != "" {
		binDir = dir
		return m.Run()
	}
	const flawed = "github.com/taskhost/taskhost/sdk/executortest/internal/flawed"
	dir, err := testbin.TempDir(context.Background(), "thkbin",
		testbin.Build{Package: testbin.Taskhost}, testbin.Build{Package: testbin.Confine}, testbin.Build{Package: testbin.Testexec},
		testbin.Build{Package: testbin.Legacy}, testbin.Build{Package: flawed},
		// An "older release" of flawed that writes the schema flawed/1, and
		// a current one that no longer reads it.
		testbin.Build{Name: "flawed-old", Package: flawed, LDFlags: "-X main.schemaVersion=1"},
		testbin.Build{Name: "flawed-noold", Package: flawed, LDFlags: "-X main.acceptOld=no"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	// The package's own tests (effects_internal_test.go) find the
	// binaries here too.
	if err := os.Setenv(binDirEnv, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func bin(name string) string { return filepath.Join(binDir, name) }

func TestTestexec(t *testing.T) {
	t.Parallel()
	executortest.Run(t, executortest.Options{
		Binary:      bin("testexec"),
		Kind:        "testexec",
		TaskhostBin: bin("taskhost"),
		Spec: func(scenario string) map[string]any {
			var o map[string]any
			switch scenario {
			case executortest.ScenarioComplete, executortest.ScenarioDeterministic:
				o = map[string]any{"steps": 3}
			case executortest.ScenarioLong:
				o = map[string]any{"steps": 1000}
			case executortest.ScenarioSlow:
				o = map[string]any{"steps": 1, "sleep_ms": 60000}
			case executortest.ScenarioCrash:
				// Attempt 2 is slow; after the resume the attempts are
				// numbered on and run fast.
				o = map[string]any{"steps": 3, "sleep_at_attempt": 2, "long_sleep_ms": 3000}
			case executortest.ScenarioOversized:
				o = map[string]any{"steps": 1, "result_bytes": 70000}
			default:
				return nil
			}
			return map[string]any{"goal": "executortest: " + scenario, "testexec": o}
		},
	})
}

// legacyScript drives the legacy executor through the kit's scenarios with
// the host's scripted model. A scenario is told by a marker in its goal,
// which legacy sends in the system message. A goal without a marker gets
// the embedded default script's 3-step task.
const legacyScript = `{
  "version": 1,
  "description": "executortest scenarios for the legacy executor",
  "rules": [
    {"name": "long: step 1", "when": {"system_contains": "[kit:long]", "last_role": "user", "contains": " step 1/"}, "reply": {"content": "long task: part 1 done, more to do"}},
    {"name": "long: step 2", "when": {"system_contains": "[kit:long]", "last_role": "user", "contains": " step 2/"}, "reply": {"content": "long task: part 2 done, more to do"}},
    {"name": "long: step 3", "when": {"system_contains": "[kit:long]", "last_role": "user", "contains": " step 3/"}, "reply": {"content": "long task: part 3 done, more to do"}},
    {"name": "long: step 4", "when": {"system_contains": "[kit:long]", "last_role": "user", "contains": " step 4/"}, "reply": {"content": "long task: part 4 done, more to do"}},
    {"name": "long: later", "when": {"system_contains": "[kit:long]"}, "reply": {"content": "long task: still more to do"}},

    {"name": "slow: sleep", "when": {"system_contains": "[kit:slow]", "last_role": "user"}, "reply": {"tool_calls": [{"name": "time.sleep", "arguments": {"seconds": 3}}]}},
    {"name": "slow: done", "when": {"system_contains": "[kit:slow]", "tool": "time.sleep"}, "reply": {"content": "TASK_COMPLETE: slept"}},

    {"name": "crash: step 1", "when": {"system_contains": "[kit:crash]", "last_role": "user", "contains": " step 1/"}, "reply": {"content": "crash task: part 1 done"}},
    {"name": "crash: step 2 sleeps", "when": {"system_contains": "[kit:crash]", "last_role": "user", "contains": " step 2/"}, "reply": {"tool_calls": [{"name": "time.sleep", "arguments": {"seconds": 3}}]}},
    {"name": "crash: step 2 done", "when": {"system_contains": "[kit:crash]", "tool": "time.sleep"}, "reply": {"content": "crash task: part 2 done"}},
    {"name": "crash: step 3", "when": {"system_contains": "[kit:crash]", "last_role": "user"}, "reply": {"content": "TASK_COMPLETE: crash task done"}},

    {"name": "default: step 1, write notes", "when": {"last_role": "user", "contains": " step 1/"}, "reply": {"tool_calls": [{"name": "workspace.write", "arguments": {"path": "notes.md", "content": "# Notes\n"}}]}},
    {"name": "default: step 1, after the write", "when": {"tool": "workspace.write"}, "reply": {"content": "wrote notes"}},
    {"name": "default: step 2, run a command", "when": {"last_role": "user", "contains": " step 2/"}, "reply": {"tool_calls": [{"name": "shell.run", "arguments": {"command": "echo hello"}}]}},
    {"name": "default: step 2, after the command", "when": {"tool": "shell.run"}, "reply": {"content": "ran the command"}},
    {"name": "default: step 3, complete", "when": {"last_role": "user", "contains": " step 3/"}, "reply": {"content": "TASK_COMPLETE: report ready"}},
    {"name": "default", "when": {}, "reply": {"content": "TASK_COMPLETE: scripted default reply"}}
  ]
}`

func TestLegacy(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "kit-script.json")
	if err := os.WriteFile(script, []byte(legacyScript), 0o600); err != nil {
		t.Fatal(err)
	}
	executortest.Run(t, executortest.Options{
		Binary:      bin("taskhost-executor-legacy"),
		Kind:        "legacy",
		TaskhostBin: bin("taskhost"),
		Config:      "[model]\nscript = " + strconv.Quote(script) + "\n",
		Spec: func(scenario string) map[string]any {
			switch scenario {
			case executortest.ScenarioComplete, executortest.ScenarioDeterministic:
				return map[string]any{"goal": "write notes, run a command, report"}
			case executortest.ScenarioLong, executortest.ScenarioSlow, executortest.ScenarioCrash:
				return map[string]any{"goal": "[kit:" + scenario + "] a task of the conformance kit"}
			}
			return nil
		},
		Skip: []string{executortest.CheckResultTooLarge},
		SkipReasons: map[string]string{
			executortest.CheckResultTooLarge: "legacy's result is its final summary, at most 2000 characters: it cannot exceed 64 KiB",
		},
	})
}

// flawedSpec returns the specs of the flawed executor, with flaws added
// to the options of some scenarios.
func flawedSpec(flaws map[string]map[string]any) func(string) map[string]any {
	return func(scenario string) map[string]any {
		var o map[string]any
		switch scenario {
		case executortest.ScenarioComplete, executortest.ScenarioDeterministic:
			o = map[string]any{"steps": 3}
		case executortest.ScenarioLong:
			o = map[string]any{"steps": 1000}
		case executortest.ScenarioSlow:
			o = map[string]any{"steps": 1, "slow_step": 1, "slow_ms": 60000}
		case executortest.ScenarioCrash:
			// Step 2 appends to a file before its slow wait, so the kill
			// lands after an effect that the re-run must replay.
			o = map[string]any{"steps": 3, "slow_step": 2, "slow_ms": 2500, "effect_step": 2}
		case executortest.ScenarioOversized:
			o = map[string]any{"steps": 1, "result_bytes": 70000}
		default:
			return nil
		}
		for k, v := range flaws[scenario] {
			o[k] = v
		}
		for k, v := range flaws["*"] {
			o[k] = v
		}
		return map[string]any{"goal": "executortest: " + scenario, "flawed": o}
	}
}

// TestFlawedWithoutFlaws passes a conforming executor, and with it a set
// of options that meets every precondition: the complete scenario's first
// step fails unless Options.Files seeded its input, the complete and
// crash scenarios ask a question whose scripted answer their results show,
// and the complete scenario's first step calls the scripted model, which
// answers with a tool call, and keeps its last reply in the result.
func TestFlawedWithoutFlaws(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("testdata/plan-script.json")
	if err != nil {
		t.Fatal(err)
	}
	executortest.Run(t, executortest.Options{
		Binary:      bin("flawed"),
		OldBinary:   bin("flawed-old"),
		Kind:        "flawed",
		TaskhostBin: bin("taskhost"),
		Spec: flawedSpec(map[string]map[string]any{
			executortest.ScenarioComplete: {"need_file": "input/seed.txt", "need_content": "seeded by the kit\n", "ask": []string{"Which branch?"},
				"plan": "[flawed plan] write the plan to plan.md"},
			executortest.ScenarioCrash: {"ask": []string{"Which branch?"}},
		}),
		Files:  seedFiles, // the example's, which docs/executor-sdk.md shows
		Inputs: branchInputs,
		Result: branchResult,
		Config: "[model]\nprovider = \"scripted\"\nscript = " + strconv.Quote(script) + "\n",
	})
}

// branchInputs answers the question of the complete and crash scenarios.
func branchInputs(scenario string) []any {
	switch scenario {
	case executortest.ScenarioComplete, executortest.ScenarioCrash:
		return []any{"main"}
	}
	return nil
}

// branchResult is the result the complete and crash scenarios must end with:
// their steps, the answer, and the model's last reply.
func branchResult(scenario string) func(json.RawMessage) error {
	switch scenario {
	case executortest.ScenarioComplete:
		return executortest.ResultEquals(map[string]any{"steps": 3, "answers": []string{"main"}, "plan": "plan written to plan.md"})
	case executortest.ScenarioCrash:
		return executortest.ResultEquals(map[string]any{"steps": 3, "answers": []string{"main"}})
	}
	return nil
}

// flawCase is an executor that breaks one rule, and what the kit must say.
type flawCase struct {
	opts      func() executortest.Options
	check     string // the check that must fail
	subtest   string // under check, if any
	wantInLog string
}

func flawCases() map[string]flawCase {
	flawed := func(flaws map[string]map[string]any) executortest.Options {
		return executortest.Options{Binary: bin("flawed"), Kind: "flawed", TaskhostBin: bin("taskhost"), Spec: flawedSpec(flaws)}
	}
	return map[string]flawCase{
		"kind_mismatch": {
			opts: func() executortest.Options {
				o := flawed(nil)
				o.Kind = "flawd"
				return o
			},
			check: executortest.CheckDescribe, wantInLog: `Describe().Kind is "flawed" but Options.Kind is "flawd"`,
		},
		"one_step": {
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioComplete: {"steps": 1}})
			},
			check: executortest.CheckComplete, wantInLog: "completed in 1 step",
		},
		"ignores_ctx": {
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioSlow: {"ignore_ctx": true}})
			},
			check: executortest.CheckCancel, subtest: "SIGINT", wantInLog: "Step did not return after its context was cancelled",
		},
		"ignores_ctx_and_sigterm": {
			opts: func() executortest.Options {
				return executortest.Options{
					Binary: bin("testexec"), Kind: "testexec", TaskhostBin: bin("taskhost"),
					Spec: func(string) map[string]any {
						return map[string]any{"goal": "g", "testexec": map[string]any{"sleep_ms": 60000, "ignore_ctx": true}}
					},
				}
			},
			check: executortest.CheckCancel, subtest: "SIGTERM", wantInLog: "the executor process lived",
		},
		"small_result": {
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioOversized: {"result_bytes": 0}})
			},
			check: executortest.CheckResultTooLarge, wantInLog: "must complete with a result over 64 KiB",
		},
		"short_long": {
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioLong: {"steps": 2}})
			},
			check: executortest.CheckStepBudget, wantInLog: "task completed in 2 steps",
		},
		"forgets": {
			opts:  func() executortest.Options { return flawed(map[string]map[string]any{"*": {"forget": true}}) },
			check: executortest.CheckCheckpointRoundTrip, wantInLog: "takes 3 steps when it runs uninterrupted, but 4 when",
		},
		// The precondition refusals: a scenario that cannot make its check
		// mean anything fails that check, naming the scenario to change.
		"slow_step_too_quick": {
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioSlow: {"slow_ms": 12}})
			},
			check: executortest.CheckCancel, subtest: "SIGINT",
			wantInLog: `precondition: the "slow" scenario's first step (attempt 1) ended`,
		},
		"crash_step_too_quick": {
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioCrash: {"slow_ms": 12}})
			},
			check:     executortest.CheckCrashResume,
			wantInLog: `precondition: the "crash" scenario's second step (attempt 2) ended`,
		},
		"crash_two_steps": {
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioCrash: {"steps": 2}})
			},
			check:     executortest.CheckCrashResume,
			wantInLog: `precondition: the "crash" task completed in 2 steps over the kill and the resume; it must take at least 3`,
		},
		"files_not_seeded": {
			// The executor needs a file that Options.Files does not give:
			// the task fails, which shows that the files the passing case
			// seeds are what made it pass.
			opts: func() executortest.Options {
				return flawed(map[string]map[string]any{executortest.ScenarioComplete: {"need_file": "input/seed.txt", "need_content": "x"}})
			},
			check: executortest.CheckComplete, wantInLog: "flawed: read input/seed.txt",
		},
		// The effect, result and input checks.
		// No repeats_effect case: the flawed executor's varied re-issue is
		// a workspace.write, whose killed run the resume rolls back (the
		// workspace restored as of the last committed step), so it repeats
		// nothing; TestCountCalls keeps the count of a tool that is not
		// rolled back.
		"result_changes_on_resume": {
			opts: func() executortest.Options {
				o := flawed(map[string]map[string]any{executortest.ScenarioCrash: {"result_run": true}})
				o.Result = func(string) func(json.RawMessage) error { return executortest.ResultEquals(map[string]int{"steps": 3}) }
				return o
			},
			check:     executortest.CheckCrashResume,
			wantInLog: `after the SIGKILL of the executor process and the resume, the "crash" task's result is not what Options.Result("crash") expects: the result is {"run":2,"steps":3}, want {"steps":3}`,
		},
		"wrong_result": {
			opts: func() executortest.Options {
				o := flawed(nil)
				o.Result = func(string) func(json.RawMessage) error { return executortest.ResultEquals(map[string]int{"steps": 4}) }
				return o
			},
			check:     executortest.CheckComplete,
			wantInLog: `run uninterrupted, the "complete" task's result is not what Options.Result("complete") expects: the result is {"steps":3}, want {"steps":4}`,
		},
		"inputs_short": {
			opts: func() executortest.Options {
				o := flawed(map[string]map[string]any{executortest.ScenarioComplete: {"ask": []string{"Which branch?", "Which tag?"}}})
				o.Inputs = func(string) []any { return []any{"main"} }
				return o
			},
			check:     executortest.CheckComplete,
			wantInLog: `the "complete" task asked an input question past the answers Options.Inputs("complete") gives`,
		},
		"drops_old_schema": {
			opts: func() executortest.Options {
				o := flawed(nil)
				o.Binary, o.OldBinary = bin("flawed-noold"), bin("flawed-old")
				return o
			},
			check: executortest.CheckSchemaUpgrade, wantInLog: `the old build writes checkpoints of schema "flawed/1"`,
		},
	}
}

// TestKitCatchesFlaws runs the kit against executors that each break one
// rule, in a re-executed test binary, and checks that the right check
// fails with the right advice.
func TestKitCatchesFlaws(t *testing.T) {
	t.Parallel()
	if os.Getenv(helperEnv) != "" {
		t.Skip("running as a helper")
	}
	cases := flawCases()
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		c := cases[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestKitHelper$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+name, binDirEnv+"="+binDir)
			out, err := cmd.CombinedOutput()
			log := string(out)
			if err == nil {
				t.Fatalf("the kit passed an executor with the flaw %q:\n%s", name, log)
			}
			failed := "--- FAIL: TestKitHelper/" + c.check
			if c.subtest != "" {
				failed += "/" + c.subtest
			}
			if !strings.Contains(log, failed) {
				t.Errorf("want %q in the output:\n%s", failed, log)
			}
			if !strings.Contains(log, c.wantInLog) {
				t.Errorf("want %q in the output:\n%s", c.wantInLog, log)
			}
			if c.check != executortest.CheckDescribe && strings.Contains(log, "--- FAIL: TestKitHelper/"+executortest.CheckDescribe) {
				t.Errorf("the describe check failed too:\n%s", log)
			}
		})
	}
}

// TestKitHelper runs one flaw case of TestKitCatchesFlaws: the check under
// test and describe, every other check skipped.
func TestKitHelper(t *testing.T) {
	t.Parallel()
	name := os.Getenv(helperEnv)
	if name == "" {
		t.Skip("runs only as a helper of TestKitCatchesFlaws")
	}
	c, ok := flawCases()[name]
	if !ok {
		t.Fatalf("unknown case %q", name)
	}
	opts := c.opts()
	opts.SkipReasons = map[string]string{}
	for _, check := range []string{
		executortest.CheckDescribe, executortest.CheckComplete, executortest.CheckCancel, executortest.CheckResultTooLarge,
		executortest.CheckStepBudget, executortest.CheckCrashResume, executortest.CheckHostCrashResume, executortest.CheckCheckpointRoundTrip,
		executortest.CheckSchemaUpgrade, executortest.CheckDeterminism,
	} {
		// checkpoint_round_trip needs crash_resume's outcome.
		keep := check == c.check || check == executortest.CheckDescribe ||
			(c.check == executortest.CheckCheckpointRoundTrip && check == executortest.CheckCrashResume)
		if !keep {
			opts.Skip = append(opts.Skip, check)
			opts.SkipReasons[check] = "not under test in this flaw case"
		}
	}
	executortest.Run(t, opts)
}
