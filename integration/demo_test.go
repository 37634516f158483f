package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/internal/testwait"
)

// demoBinDir makes a directory with taskhost and the named executors, as
// `make build` leaves bin/: the demo finds its executors beside itself.
func demoBinDir(t *testing.T, executors ...string) string {
	t.Helper()
	// An install dir: a plugin under a uid of the daemon's pool runs what
	// it holds by path (machinespirit starts its worker through its own
	// binary when there is no taskhost-confine).
	dir := testwait.ShortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyBin := func(name string) {
		data, err := os.ReadFile(filepath.Join(binDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyBin("taskhost")
	for _, kind := range executors {
		name := "taskhost-executor-" + kind
		if _, err := os.Stat(filepath.Join(binDir, name)); err == nil {
			copyBin(name)
			continue
		}
		if err := testbin.BuildAll(context.Background(), dir, testbin.Build{Package: "github.com/taskhost/taskhost/plugins/" + kind + "/cmd/" + name}); err != nil {
			t.Fatalf("build %s: %v", name, err)
		}
	}
	return dir
}

func runDemo(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "taskhost"), append([]string{"demo"}, args...)...)
	start := time.Now()
	out, errOut, code := runCmd(t, cmd)
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the demo took %v: it must finish in under a minute", d)
	}
	return out, errOut, code
}

// A missing executor binary: the demo says which and exits 5.
func TestDemoNamesAMissingExecutor(t *testing.T) {
	t.Parallel()
	dir := demoBinDir(t, "legacy")
	_, errOut, code := runDemo(t, dir)
	if code != 5 || !strings.Contains(errOut, "machinespirit executor is missing") || !strings.Contains(errOut, "make build") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// The README's demo on the real executors, checking its own summary.
func TestDemoCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("swipl"); err != nil {
		t.Skip("the machinespirit executor needs SWI-Prolog (swi-prolog-nox)")
	}
	dir := demoBinDir(t, "legacy", "machinespirit")
	out, errOut, code := runDemo(t, dir, "--json")
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var v struct {
		Tasks []struct {
			Task struct {
				Executor string `json:"executor"`
				Status   string `json:"status"`
				RunID    int64  `json:"run_id"`
			} `json:"task"`
			Killed      bool   `json:"killed"`
			Interrupted string `json:"interrupted_reason"`
			Approvals   int    `json:"approvals"`
		} `json:"tasks"`
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !v.OK || len(v.Tasks) != 2 {
		t.Fatalf("summary: %+v\n%s", v, errOut)
	}
	legacy, rlm := v.Tasks[0], v.Tasks[1]
	if legacy.Task.Executor != "legacy" || legacy.Task.Status != "completed" || legacy.Approvals < 1 {
		t.Errorf("legacy: %+v", legacy)
	}
	if rlm.Task.Executor != "machinespirit" || rlm.Task.Status != "completed" || !rlm.Killed ||
		rlm.Interrupted != "executor_crashed" || rlm.Task.RunID != 2 {
		t.Errorf("machinespirit: %+v", rlm)
	}
	if !strings.Contains(errOut, "approved automatically by the demo") {
		t.Errorf("no visible notice of the automatic approval:\n%s", errOut)
	}
}
