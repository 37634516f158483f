package machinespirit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/sdk/executortest"
)

// Operator graphs for the conformance kit's scenarios: only shipped
// handlers, pinned like an operator would pin them.
var kitGraphs = map[string]string{
	// A first step of 3 s spent in the host's time.sleep tool.
	"kit_slow": g("kit_slow", okState,
		`nodes([node(wait, tool('time.sleep', json{seconds: 3})), node(done, patch([count=1]))])`,
		`edges([edge(start, wait), edge(wait, done), edge(done, end)])`),
	// Three steps, the second 3 s long.
	"kit_crash": g("kit_crash", okState,
		`nodes([node(one, patch([count=1])), node(two, tool('time.sleep', json{seconds: 3})), node(three, patch([count=1]))])`,
		`edges([edge(start, one), edge(one, two), edge(two, three), edge(three, end)])`),
}

// TestConformance runs the SDK's conformance kit against the plugin binary
// through a real taskhost: TASKHOST_BIN, or one built here. The kit is
// given a wrapper that adds the operator graphs its scenarios use, keeping
// argv[0] so the kit can find the plugin.
func TestConformance(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	// Like an install dir: a root host runs the plugin under a uid of its
	// own, which reaches the wrapper, the binary and the graphs only
	// through their "others" bits.
	dir, err := os.MkdirTemp("", "msconf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	taskhost := os.Getenv("TASKHOST_BIN")
	if taskhost == "" {
		taskhost = filepath.Join(dir, "taskhost")
		if out, err := exec.Command("go", "build", "-o", taskhost, "../../cmd/taskhost").CombinedOutput(); err != nil {
			t.Fatalf("build taskhost: %v\n%s", err, out)
		}
	}
	bin := filepath.Join(dir, "taskhost-executor-machinespirit-real")
	build := exec.Command("go", "build", "-o", bin, "./cmd/taskhost-executor-machinespirit")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	graphs := filepath.Join(dir, "graphs")
	if err := os.Mkdir(graphs, 0o755); err != nil {
		t.Fatal(err)
	}
	pins := ""
	for name, src := range kitGraphs {
		if err := os.WriteFile(filepath.Join(graphs, name+".pl"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(src))
		pins += fmt.Sprintf(" --graph-pin %s=%s", name, hex.EncodeToString(sum[:]))
	}
	wrapper := filepath.Join(dir, "machinespirit-wrapper")
	script := fmt.Sprintf("#!/bin/bash\nexec -a \"$0\" %s --swipl %s --swipl-version %s --graphs-dir %s%s \"$@\"\n", bin, testSwipl, testVersion, graphs, pins)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	par := func(pass int) map[string]any {
		return map[string]any{"goal": "conformance", "machinespirit": map[string]any{
			"graph": "plan_act_review", "input": map[string]any{"tasks": []string{"a", "b"}, "pass_on_attempt": pass, "max_attempts": 4}}}
	}
	executortest.Run(t, executortest.Options{
		Binary:      wrapper,
		Kind:        Kind,
		TaskhostBin: taskhost,
		Config:      "[machine_spirit]\nenabled = true\n",
		Spec: func(scenario string) map[string]any {
			switch scenario {
			case executortest.ScenarioComplete, executortest.ScenarioDeterministic:
				return par(1)
			case executortest.ScenarioLong:
				return par(4)
			case executortest.ScenarioSlow:
				return map[string]any{"goal": "slow", "machinespirit": map[string]any{"graph": "kit_slow"}}
			case executortest.ScenarioCrash:
				return map[string]any{"goal": "crash", "machinespirit": map[string]any{"graph": "kit_crash"}}
			}
			return nil
		},
		Skip: []string{executortest.CheckResultTooLarge, executortest.CheckSchemaUpgrade},
		SkipReasons: map[string]string{
			executortest.CheckResultTooLarge: "no shipped graph makes a result over 64 KiB; the host enforces the bound on any result",
			executortest.CheckSchemaUpgrade:  "there is no earlier release of machinespirit",
		},
	})
}
