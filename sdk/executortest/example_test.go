package executortest_test

import (
	"github.com/taskhost/taskhost/sdk/executortest"
)

// seedFiles seeds the complete scenario's workspace with input/seed.txt.
func seedFiles(scenario string) map[string][]byte {
	if scenario != executortest.ScenarioComplete {
		return nil
	}
	return map[string][]byte{"input/seed.txt": []byte("seeded by the kit\n")}
}

// The kit places a scenario's files in its task's workspace before the
// first step, where the executor reads them with the workspace.read tool.
// TestFlawedWithoutFlaws runs these options' Files against an executor
// that fails without the file.
func ExampleOptions_files() {
	_ = executortest.Options{
		Binary: "bin/taskhost-executor-checklist",
		Kind:   "checklist",
		Spec:   func(string) map[string]any { return map[string]any{"goal": "read input/seed.txt"} },
		Files:  seedFiles,
	}
}
