package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testbin"
)

// testexecDir holds a built testexec executor, shared by the tests.
var testexecDir = testbin.Lazy("clidemo", testbin.Executor("testexec", testbin.Testexec))

// testDemoPlan is the demo's script on the test executor: a task that asks
// for an approval, and one whose plugin is killed during its first step
// (which sleeps, so the kill always lands in it) and that then resumes.
func testDemoPlan() demoPlan {
	return demoPlan{
		config:    "[tasks]\nmax_concurrent = 2\nprestart = 0\n",
		executors: []string{"testexec"},
		tasks: []demoTask{
			{title: "asks for an approval", executor: "testexec", spec: `{"goal": "g", "testexec": {"steps": 2, "request_approval": true}}`},
			{title: "killed, then resumed", executor: "testexec", kill: true, files: map[string]string{"context.txt": "x"},
				spec: `{"goal": "g", "testexec": {"steps": 2, "sleep_at_attempt": 1, "long_sleep_ms": 60000}}`},
		},
	}
}

func runTestDemo(t *testing.T, o demoOptions, stdin string) (string, string, int) {
	t.Helper()
	dir, err := testexecDir()
	if err != nil {
		t.Fatal(err)
	}
	o.executorDir = dir
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := runDemo(ctx, &env{stdout: &out, stderr: &errOut, stdin: strings.NewReader(stdin)}, o, testDemoPlan())
	return out.String(), errOut.String(), code
}

func TestDemoFlow(t *testing.T) {
	out, errOut, code := runTestDemo(t, demoOptions{}, "")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"approved automatically by the demo",
		"!! SIGKILL to the testexec plugin",
		"interrupted (executor_crashed)",
		"-- resuming",
		"== summary",
		"demo: all checks passed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoJSONSummary(t *testing.T) {
	out, errOut, code := runTestDemo(t, demoOptions{json: true}, "")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var v struct {
		Tasks []demoRow `json:"tasks"`
		OK    bool      `json:"ok"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !v.OK || len(v.Tasks) != 2 || v.Tasks[0].Approvals != 2 || !v.Tasks[1].Killed ||
		v.Tasks[1].Interrupted != "executor_crashed" || v.Tasks[1].Task.RunID != 2 || v.Tasks[1].Task.Status != "completed" {
		t.Fatalf("summary %+v", v)
	}
	if !strings.Contains(errOut, "== summary") && !strings.Contains(errOut, "SIGKILL") {
		t.Errorf("progress not on stderr with --json:\n%s", errOut)
	}
}

// With --interactive and a "no", the approval is rejected: the task fails
// and the demo's own check says so (exit 1).
func TestDemoInteractiveReject(t *testing.T) {
	out, errOut, code := runTestDemo(t, demoOptions{interactive: true}, "n\n")
	if code != exitFailed || !strings.Contains(errOut, "Approve? [y/N]") || !strings.Contains(out, "FAIL testexec task") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestDemoMissingExecutor(t *testing.T) {
	var out, errOut bytes.Buffer
	code := runDemo(context.Background(), &env{stdout: &out, stderr: &errOut, stdin: strings.NewReader("")},
		demoOptions{executorDir: t.TempDir()}, defaultDemoPlan())
	if code != exitUnavailable || !strings.Contains(errOut.String(), "the legacy executor is missing") ||
		!strings.Contains(errOut.String(), "make build") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}
