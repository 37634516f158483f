package integration

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// boundary is a moment of a multi-effect step at which the host is killed.
type boundary struct {
	name string
	// blockTool keeps the step's second tool running (it waits for a "go"
	// file in the workspace) until after the kill.
	blockTool bool
	// waitStep keeps the step from ending after its tools (testexec's
	// wait_file) until after the kill.
	waitStep bool
	// replayed: attempt 1's observed calls precede the kill, so a resume
	// replays them and each step writes exactly these lines once.
	first, second bool
	// reached polls the store, or the workspace, for the moment.
	reached func(db *sql.DB, ws, id string) (bool, error)
}

// secondTool is the status of attempt 1's second tool effect, "" while it
// has not been admitted.
func secondTool(db *sql.DB, id string) (string, error) {
	rows, err := db.Query(`SELECT status FROM effects WHERE task_id = ? AND attempt = 1 AND kind = 'tool' ORDER BY seq`, id)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var st []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return "", err
		}
		st = append(st, s)
	}
	if len(st) < 2 {
		return "", rows.Err()
	}
	return st[1], rows.Err()
}

var inflightBoundaries = []boundary{
	{name: "dispatching_written", blockTool: true, first: true, reached: func(db *sql.DB, _, id string) (bool, error) {
		s, err := secondTool(db, id)
		return s == "dispatching", err
	}},
	{name: "tool_running", blockTool: true, first: true, reached: func(_ *sql.DB, ws, _ string) (bool, error) {
		_, err := os.Stat(filepath.Join(ws, "tool.pid"))
		return err == nil, nil
	}},
	{name: "observation_written", waitStep: true, first: true, second: true, reached: func(db *sql.DB, _, id string) (bool, error) {
		s, err := secondTool(db, id)
		return s == "observed", err
	}},
	{name: "step_committed", reached: func(db *sql.DB, _, id string) (bool, error) {
		var s string
		err := db.QueryRow(`SELECT status FROM attempts WHERE task_id = ? AND number = 1`, id).Scan(&s)
		if err == sql.ErrNoRows {
			return false, nil
		}
		return s == "completed", err
	}},
}

// The in-flight step under a host killed at each of its effect boundaries:
// every step makes two shell.run calls that each append a line to a file
// in the workspace (the real side effects), and `taskhost run` is SIGTERMed
// or SIGKILLed when the second call's dispatch is written, while it runs,
// once its observation is written, and once the step is committed. Each
// round resumes the task to completion (approving the retries the executor
// asks for) and checks that the lines written never exceed the tool calls
// charged: an observed call is replayed, never run again, and a retried
// one is charged again. TASKHOST_PROOF_ROUNDS sets the rounds per boundary
// and signal (default 5; the proof is 50).
func TestInflightStepKilledAtEveryBoundary(t *testing.T) {
	rounds := envInt(t, "TASKHOST_PROOF_ROUNDS", 5)
	if testing.Short() {
		rounds = 1
	}
	start := time.Now()
	var total, maxLines int
	for _, b := range inflightBoundaries {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(b.name+"/"+strings.ToUpper(unixSigName(sig)), func(t *testing.T) {
				retried := 0
				for i := range rounds {
					lines := inflightRound(t, b, sig, i)
					total++
					if lines > 6 {
						retried++
					}
					maxLines = max(maxLines, lines)
				}
				t.Logf("%d rounds, %d where the in-flight call had written and wrote again on its approved, charged retry", rounds, retried)
			})
		}
	}
	t.Logf("%d rounds (%d per boundary and signal) in %v; at most %d writes in a round", total, rounds, time.Since(start).Round(time.Millisecond), maxLines)
}

func unixSigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "sigkill"
	}
	return "sigterm"
}

// inflightRound runs one task to the kill at b, resumes it to completion
// and checks its real writes against its charged tool calls. It returns
// the number of writes.
func inflightRound(t *testing.T, b boundary, sig syscall.Signal, round int) int {
	t.Helper()
	data, work := shortTempDir(t), shortTempDir(t)
	waitFile := filepath.Join(work, "step.go")
	te := map[string]any{
		"steps": 3, "approve_retry": true,
		"call_tool_first": map[string]any{"name": "shell.run", "args": map[string]any{"command": "echo first >> writes"}},
		"call_tool": map[string]any{"name": "shell.run", "args": map[string]any{
			"command": "echo second >> writes; [ -e go ] && exit 0; echo $$ > tool.pid; while [ ! -e go ]; do sleep 0.005; done"}},
	}
	if b.waitStep {
		te["wait_file"] = waitFile
	}
	specFile := writeSpec(t, work, map[string]any{"goal": "write twice per step", "testexec": te})
	cfg := writeConfig(t, work, fmt.Sprintf("[executors.testexec]\npath = %q\nread_write = [%q]\n[tools.\"shell.run\"]\napproval = \"never\"\ntimeout_seconds = 600\n",
		filepath.Join(binDir, "taskhost-executor-testexec"), work))

	h := startTaskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "testexec", "--spec-file", specFile, "--approve-all")
	id := strings.Fields(h.line(t, func(l string) bool { return strings.HasPrefix(l, "task ") }))[1]
	ws := filepath.Join(data, "workspaces", id)
	release := func() {
		t.Helper()
		// The host makes the workspace when the step starts.
		eventually(t, 30*time.Second, "the workspace "+ws, func() bool { _, err := os.Stat(ws); return err == nil })
		if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !b.blockTool {
		release()
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, "taskhost.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := b.reached(db, ws, id)
		if err != nil && !strings.Contains(err.Error(), "no such table") {
			t.Fatalf("round %d: polling the store: %v", round, err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: %s not reached in 30 s; stderr:\n%s", round, b.name, h.stderr)
		}
		time.Sleep(200 * time.Microsecond)
	}
	if err := h.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { h.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("round %d: taskhost run did not exit 30 s after %v", round, sig)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "tool.pid")); err == nil {
		var pid int
		if _, err := fmt.Sscan(string(data), &pid); err == nil {
			eventually(t, 10*time.Second, "the in-flight tool to die with its host", func() bool { return !alive(pid) })
		}
	}
	release()
	if err := os.WriteFile(waitFile, []byte("go"), 0o644); err != nil {
		t.Fatal(err)
	}

	v := inspect(t, data, id)
	if b.blockTool || b.waitStep {
		if v.Task.Status == "completed" {
			t.Fatalf("round %d: the task completed before the kill at %s", round, b.name)
		}
	}
	if v.Task.Status != "completed" {
		out, errOut, code := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--resume", id, "--approve-all")
		if code != 0 {
			t.Fatalf("round %d: resume exit %d\nstdout:\n%s\nstderr:\n%s", round, code, out, errOut)
		}
		v = inspect(t, data, id)
	}
	if v.Task.Status != "completed" {
		t.Fatalf("round %d: task %s after resume: %+v", round, id, v.Task)
	}
	writes, err := os.ReadFile(filepath.Join(ws, "writes"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(string(writes), "\n")
	charged := v.Task.Budgets["tool_calls"].Used
	if int64(lines) > charged {
		t.Fatalf("round %d: %d real writes for %d charged tool calls (%s, %v):\n%s", round, lines, charged, b.name, sig, writes)
	}
	// Three steps of two calls each ran at least once; a call observed
	// before the kill is replayed, never run again.
	firsts, seconds := strings.Count(string(writes), "first"), strings.Count(string(writes), "second")
	if firsts < 3 || seconds < 3 || (b.first && firsts != 3) || (b.second && seconds != 3) {
		t.Fatalf("round %d (%s, %v): writes %q: want each call once per step, and the observed ones never again", round, b.name, sig, writes)
	}
	return lines
}
