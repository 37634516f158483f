package executortest_test

import (
	"encoding/json"
	"fmt"

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

// ResultEquals compares a completed task's result with a value by JSON
// meaning: spacing and key order do not count.
func ExampleResultEquals() {
	check := executortest.ResultEquals(map[string]any{"steps": 3, "files": []string{"a.md"}})
	fmt.Println(check(json.RawMessage(`{ "files": ["a.md"], "steps": 3 }`)))
	fmt.Println(check(json.RawMessage(`{"files": [], "steps": 3}`)))
	// Output:
	// <nil>
	// the result is {"files": [], "steps": 3}, want {"files":["a.md"],"steps":3}
}
