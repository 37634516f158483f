package executortest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEffectCountIsTheWorkspaces checks the effect count against the effect
// itself: the flawed executor's crash scenario appends a line to a file of
// its workspace in step 2, whose plugin the kit kills after the append;
// the lines in the file after the resume must be the runs the ledger
// counts. The resume restores the workspace as of the last committed step,
// without the killed attempt's line, and the append runs again: once in
// the file and in the count, whether the re-run makes the same call or
// another (the vary flaw), and never reported as repeated.
func TestEffectCountIsTheWorkspaces(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("EXECUTORTEST_BIN_DIR") // set by TestMain
	if dir == "" {
		t.Skip("needs the binaries TestMain builds")
	}
	for _, c := range []struct {
		name     string
		vary     bool
		lines    int
		repeated bool
	}{
		{"made again", false, 1, false},
		{"re-issued", true, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			scratch, err := scratchDir()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(scratch) })
			spec := func(string) map[string]any {
				return map[string]any{"goal": "g", "flawed": map[string]any{"steps": 3, "slow_step": 2, "slow_ms": 2500, "effect_step": 2, "vary_effect": c.vary}}
			}
			k := &kit{opts: Options{Binary: filepath.Join(dir, "flawed"), Kind: "flawed", Spec: spec, Timeout: time.Minute},
				taskhost: filepath.Join(dir, "taskhost"), scratch: scratch, root: t.Name(), sums: map[string]string{}, notes: map[string][]string{}}
			ctx := k.context(t)
			h, s, id, _, pid := k.mustCrashInSecondStep(ctx, t)
			if err := kill(pid); err != nil {
				t.Fatal(err)
			}
			if code := k.mustWait(ctx, t, s); code != exitInterrupted {
				t.Fatalf("after the kill taskhost exited %d, want %d: %s", code, exitInterrupted, s.diagnosis())
			}
			if _, code := k.mustResume(ctx, t, h, ScenarioCrash, id); code != exitOK {
				t.Fatalf("the resume exited %d", code)
			}
			v := k.mustInspect(ctx, t, h, s)
			log, err := os.ReadFile(filepath.Join(h.dataDir, "workspaces", id, "effects.log"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Count(string(log), "\n")
			cc := countCalls(v)[2]["workspace.write"]
			if cc == nil {
				t.Fatalf("the count has no workspace.write in step 2: %+v", v.Effects)
			}
			if lines != c.lines || len(cc.ran) != lines || cc.repeated() != c.repeated {
				t.Errorf("effects.log has %d lines (want %d), the ledger counts %d runs (%s), repeated() = %v (want %v)",
					lines, c.lines, len(cc.ran), effectList(cc.ran), cc.repeated(), c.repeated)
			}
		})
	}
}
