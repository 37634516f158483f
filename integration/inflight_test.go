package integration

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/taskhost/taskhost/internal/testwait"
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
		// The running command's own view of its workspace has it.
		_, err := testwait.ReadLive(filepath.Join(ws, "tool.pid"))
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
// in the workspace (the real side effects), and the host — `taskhost run`,
// and the `taskhost serve` daemon — is SIGTERMed or SIGKILLed when the
// second call's dispatch is written, while it runs, once its observation
// is written, and once the step is committed. Each round resumes the task
// to completion (approving the retries the executor asks for) and checks
// that the lines written never exceed the tool calls charged: an observed
// call is replayed, never run again, and a retried one is charged again.
// TASKHOST_PROOF_ROUNDS sets the rounds per host, boundary and signal
// (default 5; the proof is 50).
func TestInflightStepKilledAtEveryBoundary(t *testing.T) {
	t.Parallel()
	rounds := envInt(t, "TASKHOST_PROOF_ROUNDS", 5)
	if testing.Short() {
		rounds = 1
	}
	start := time.Now()
	// The rounds of one case run in order; the cases run side by side,
	// each with its own host, data dir and workspace.
	var mu sync.Mutex
	var total, maxLines int
	t.Cleanup(func() {
		t.Logf("%d rounds (%d per host, boundary and signal) in %v; at most %d writes in a round", total, rounds, time.Since(start).Round(time.Millisecond), maxLines)
	})
	for _, serve := range []bool{false, true} {
		hostName := "run"
		if serve {
			hostName = "serve"
		}
		for _, b := range inflightBoundaries {
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				t.Run(hostName+"/"+b.name+"/"+strings.ToUpper(unixSigName(sig)), func(t *testing.T) {
					t.Parallel()
					retried := 0
					for i := range rounds {
						lines := inflightRound(t, serve, b, sig, i)
						if lines > 6 {
							retried++
						}
						mu.Lock()
						total++
						maxLines = max(maxLines, lines)
						mu.Unlock()
					}
					t.Logf("%d rounds, %d where the in-flight call had written and wrote again on its approved, charged retry", rounds, retried)
				})
			}
		}
	}
}

func unixSigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "sigkill"
	}
	return "sigterm"
}

// inflightRound runs one task to the kill at b of its host (the daemon when
// serve, else `taskhost run`), resumes it to completion and checks its real
// writes against its charged tool calls. It returns the number of writes.
func inflightRound(t *testing.T, serve bool, b boundary, sig syscall.Signal, round int) int {
	t.Helper()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
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

	var h inflightHost
	if serve {
		h = startServeHost(t, data, cfg)
	} else {
		h = &runHost{started: startTaskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "testexec", "--spec-file", specFile, "--approve-all")}
	}
	id := h.create(t, specFile)
	ws := filepath.Join(data, "workspaces", id)
	release := func() {
		t.Helper()
		// The host makes the workspace when the step starts.
		testwait.Until(t, 30*time.Second, "the workspace "+ws, func() bool { _, err := os.Stat(ws); return err == nil })
		// Into a running command's view too, which would not see it.
		if err := testwait.WriteLive(filepath.Join(ws, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A run starts by rolling its workspace back to the last committed
	// step's, which has no "go": it is kept there (and in a running
	// command's view) until the round is over, so a command that polls
	// for it ends.
	keep := func() {
		// Not fatal here: the workspace may be between its rollback's
		// removal and its next write; the next tick writes it again.
		_ = testwait.WriteLive(filepath.Join(ws, "go"), nil, 0o644)
	}
	if !b.blockTool {
		release()
		defer keepReleased(keep)()
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
			t.Fatalf("round %d: %s not reached in 30 s; log:\n%s", round, b.name, h.log())
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Read before the kill: a command's writes die with its host (the
	// overlay it writes through goes with it).
	toolPID, _ := testwait.ReadLive(filepath.Join(ws, "tool.pid"))
	h.kill(t, sig)
	var pid int
	if _, err := fmt.Sscan(string(toolPID), &pid); err == nil {
		testwait.Until(t, 10*time.Second, "the in-flight tool to die with its host", func() bool { return !alive(pid) })
	}
	if b.blockTool {
		release()
		defer keepReleased(keep)()
	}
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
		h.resume(t, data, cfg, id)
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

// keepReleased calls release every 20 ms until the returned stop is
// called.
func keepReleased(release func()) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				release()
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// inflightHost is the host process a round kills.
type inflightHost interface {
	// create starts the task of specFile and returns its id.
	create(t *testing.T, specFile string) string
	// kill signals the host and waits for it to exit.
	kill(t *testing.T, sig syscall.Signal)
	// resume runs the task to completion in a new host, answering every
	// approval, and leaves no host running.
	resume(t *testing.T, data, cfg, id string)
	log() string
}

// runHost is `taskhost run`, which started the task itself.
type runHost struct{ *started }

func (h *runHost) create(t *testing.T, _ string) string {
	return strings.Fields(h.line(t, func(l string) bool { return strings.HasPrefix(l, "task ") }))[1]
}

func (h *runHost) kill(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { h.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("taskhost run did not exit 30 s after %v", sig)
	}
}

func (h *runHost) resume(t *testing.T, data, cfg, id string) {
	t.Helper()
	out, errOut, code := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--resume", id, "--approve-all")
	if code != 0 {
		t.Fatalf("resume exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func (h *runHost) log() string { return h.stderr.String() }

// serveHost is the `taskhost serve` daemon, driven through the CLI.
type serveHost struct{ d *daemon }

func startServeHost(t *testing.T, data, cfg string) *serveHost {
	t.Helper()
	return &serveHost{d: startDaemon(t, data, cfg)}
}

func (h *serveHost) create(t *testing.T, specFile string) string {
	t.Helper()
	var v oneTask
	h.d.cliJSON(t, &v, "task", "create", "--executor", "testexec", "--spec-file", specFile)
	return v.Task.ID
}

func (h *serveHost) kill(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := h.d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.d.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("taskhost serve did not exit 30 s after %v", sig)
	}
}

func (h *serveHost) resume(t *testing.T, data, cfg, id string) {
	t.Helper()
	d := startDaemon(t, data, cfg)
	var v oneTask
	d.cliJSON(t, &v, "task", "resume", id)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st statusJSON
		d.cliJSON(t, &st, "task", "status", id)
		switch st.Task.Status {
		case "completed":
			if code := d.stop(t); code != 0 {
				t.Fatalf("the daemon exited %d after SIGTERM", code)
			}
			return
		case "waiting_approval":
			var list approvalsJSON
			d.cliJSON(t, &list, "approvals", "list")
			for _, a := range list.Approvals {
				if a.TaskID == id {
					d.cliJSON(t, &struct {
						Approval approvalJSON `json:"approval"`
					}{}, "approve", a.ID)
				}
			}
		case "running", "pending":
		default:
			t.Fatalf("task %s after resume: %+v\n%s", id, st.Task, d.logText())
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s did not complete within 60 s of its resume:\n%s", id, d.logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *serveHost) log() string { return h.d.logText() }
