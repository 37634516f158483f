package checklist_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/sdk/executortest"
)

// TestConformance runs the taskhost conformance kit against the checklist
// executor as built. It builds the executor, and taskhost too unless
// TASKHOST_BIN names one.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance kit runs real hosts for about half a minute")
	}
	dir := t.TempDir()
	exe := goBuild(t, ".", "./cmd/taskhost-executor-checklist", filepath.Join(dir, "taskhost-executor-checklist"))
	taskhost := os.Getenv("TASKHOST_BIN")
	if taskhost == "" {
		// The taskhost module is this repository's root (see the replace
		// directive in go.mod).
		taskhost = goBuild(t, "../..", "./cmd/taskhost", filepath.Join(dir, "taskhost"))
	}
	// The schema_upgrade check resumes with exe a task that the previous
	// release started: CHECKLIST_OLD_BINARY names its build, else it is
	// built from the git ref CHECKLIST_OLD_REF (a release tag; default
	// HEAD, the last commit).
	old := os.Getenv("CHECKLIST_OLD_BINARY")
	if old == "" {
		ref := os.Getenv("CHECKLIST_OLD_REF")
		if ref == "" {
			ref = "HEAD"
		}
		old = executortest.BuildAt(t, ref, "./cmd/taskhost-executor-checklist")
	}
	executortest.Run(t, executortest.Options{
		Binary:      exe,
		OldBinary:   old,
		Kind:        "checklist",
		TaskhostBin: taskhost,
		Spec:        spec,
		Skip:        []string{executortest.CheckResultTooLarge},
		SkipReasons: map[string]string{
			executortest.CheckResultTooLarge: "the result lists the item files only; the host's 16 KiB spec limit keeps it far below 64 KiB",
		},
	})
}

// spec returns the task spec of each scenario of the kit.
func spec(scenario string) map[string]any {
	checklist := func(paceMS int, items ...string) map[string]any {
		return map[string]any{
			"goal":      "work through the checklist (" + scenario + ")",
			"checklist": map[string]any{"items": items, "pace_ms": paceMS},
		}
	}
	switch scenario {
	case executortest.ScenarioComplete, executortest.ScenarioDeterministic:
		return checklist(0, "buy milk", "water the plants", "call the bank")
	case executortest.ScenarioLong:
		return checklist(0, "one", "two", "three", "four", "five", "six", "seven", "eight")
	case executortest.ScenarioSlow:
		// One item, three seconds of pacing before it: the kit stops the
		// host during that wait.
		return checklist(3000, "slow item")
	case executortest.ScenarioCrash:
		// Every step waits 2 s, so the kit's SIGKILL lands inside step 2.
		return checklist(2000, "first", "second", "third")
	}
	return nil
}

// goBuild builds pkg in dir into out.
func goBuild(t *testing.T, dir, pkg, out string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s (in %s): %v\n%s", pkg, dir, err, b)
	}
	return out
}
