// Package python_test runs the conformance kit (sdk/executortest) against
// the Python SDK's example executor, pinned with its interpreter as a user
// would run it.
package python_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/sdk/executortest"
)

// python is the interpreter the SDK supports: Debian's, with its
// python3-grpcio and python3-protobuf (not a pyenv python on PATH).
const python = "/usr/bin/python3"

// needPython skips, saying why, where python lacks the SDK's dependencies.
// CI installs them (.ci/run), so there the kit runs.
func needPython(t *testing.T) { needPythonB(t) }

// stagedSDK copies the SDK into a fresh dir every uid can read (a root
// daemon runs plugins under uids of their own) and returns the copy's
// sdk/python and shared/proto/python.
func stagedSDK(tb testing.TB) (sdkDir, protoDir string) {
	tb.Helper()
	dst, err := os.MkdirTemp("", "thpysdk")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dst) })
	if err := testbin.PythonSDK(filepath.Join("..", ".."), dst); err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(dst, "sdk", "python"), filepath.Join(dst, "shared", "proto", "python")
}

func needPythonB(tb testing.TB) {
	tb.Helper()
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		tb.Skipf("%s lacks grpc or protobuf, the Python SDK's dependencies (apt-get install python3-grpcio python3-protobuf): %v %s", python, err, out)
	}
}

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance kit runs real hosts for about a minute")
	}
	needPython(t)
	sdkDir, protoDir := stagedSDK(t)
	dir, err := testbin.TempDir(context.Background(), "thpy", testbin.Build{Package: testbin.Taskhost}, testbin.Build{Package: testbin.Confine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	opts := executortest.Options{
		Binary:      filepath.Join(sdkDir, "examples", "pynotes.py"),
		Kind:        "pynotes",
		TaskhostBin: filepath.Join(dir, "taskhost"),
		Spec:        spec,
		Interpreted: &executortest.Interpreted{
			Interpreter: python,
			Args:        []string{"--pythonpath=" + sdkDir},
			ReadOnly:    []string{sdkDir, protoDir},
		},
	}
	// The schema_upgrade check resumes with the script under test a task
	// that the last commit's script started.
	if old, err := oldScript(dir); err != nil {
		opts.Skip = []string{executortest.CheckSchemaUpgrade}
		opts.SkipReasons = map[string]string{executortest.CheckSchemaUpgrade: "no earlier pynotes.py: " + err.Error()}
	} else {
		opts.OldBinary = old
	}
	executortest.Run(t, opts)
}

// oldScript writes pynotes.py as of git's HEAD into dir.
func oldScript(dir string) (string, error) {
	out, err := exec.Command("git", "show", "HEAD:./examples/pynotes.py").Output()
	if err != nil {
		return "", fmt.Errorf("git show HEAD:./examples/pynotes.py: %w", err)
	}
	path := filepath.Join(dir, "pynotes-old.py")
	return path, os.WriteFile(path, out, 0o644)
}

// spec returns the task spec of each scenario of the kit.
func spec(scenario string) map[string]any {
	notes := func(paceMS, pad int, items ...string) map[string]any {
		return map[string]any{
			"goal":  "write notes (" + scenario + ")",
			"notes": map[string]any{"items": items, "pace_ms": paceMS, "result_pad": pad},
		}
	}
	switch scenario {
	case executortest.ScenarioComplete, executortest.ScenarioDeterministic:
		return notes(0, 0, "buy milk", "water the plants", "call the bank")
	case executortest.ScenarioLong:
		return notes(0, 0, "one", "two", "three", "four", "five", "six", "seven", "eight")
	case executortest.ScenarioSlow:
		// Three seconds of pacing in the first step: the kit stops the
		// host during that wait.
		return notes(3000, 0, "slow item")
	case executortest.ScenarioCrash:
		// Every step waits 2 s, so the kit's SIGKILL lands inside step 2.
		return notes(2000, 0, "first", "second", "third")
	case executortest.ScenarioOversized:
		return notes(0, 70000, "big")
	}
	return nil
}
