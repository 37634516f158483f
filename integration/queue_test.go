package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// bulkJSON is the --json shape of task cancel|pause|resume --all.
type bulkJSON struct {
	Action string     `json:"action"`
	Tasks  []taskJSON `json:"tasks"`
	Failed []struct {
		TaskID    string `json:"task_id"`
		Principal string `json:"principal"`
		Reason    string `json:"reason"`
		Error     string `json:"error"`
	} `json:"failed"`
}

// TestDaemonQueue: through the real daemon and CLI, 200 creates against
// max_concurrent 4 and max_queued 32: 4 run, 32 wait in the queue with
// their places shown by task list, the other 164 are refused QUEUE_FULL
// (exit 4) and leave no row; a SIGKILL of the daemon keeps the queue
// (pending survives as pending) while the running four become
// interrupted; the restarted daemon starts the head of the queue by
// itself; the queue drains in FIFO order, and resume --all takes the four
// interrupted ones through it too.
func TestDaemonQueue(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	cfg := writeConfig(t, work, fmt.Sprintf("[tasks]\nmax_concurrent = 4\nmax_queued = 32\n\n[executors.testexec]\npath = %q\nread_write = [%q]\n",
		filepath.Join(binDir, "taskhost-executor-testexec"), work))
	d := startDaemon(t, data, cfg)
	gate := filepath.Join(work, "go")
	spec := writeSpec(t, work, map[string]any{"goal": "wait in line", "testexec": map[string]any{"wait_file": gate, "wait_first": true}})

	const creates, workers = 200, 4
	var mu sync.Mutex
	var admitted []string
	refused := 0
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				out, errOut, code := d.cli(t, "task", "create", "--executor", "testexec", "--spec-file", spec, "--json")
				mu.Lock()
				switch {
				case code == 0:
					var v oneTask
					if err := json.Unmarshal([]byte(out), &v); err != nil {
						t.Errorf("create output: %v\n%s", err, out)
					}
					admitted = append(admitted, v.Task.ID)
				case code == 4 && strings.Contains(errOut, `"reason":"QUEUE_FULL"`) && strings.Contains(errOut, "tasks.max_queued = 32"):
					refused++
				default:
					t.Errorf("create: exit %d\n%s%s", code, out, errOut)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range creates {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(admitted) != 36 || refused != 164 {
		t.Fatalf("%d admitted, %d refused; want 36 (4 running + 32 queued) and 164", len(admitted), refused)
	}

	// Creation order is the list's oldest-first order.
	list := func() []taskJSON {
		t.Helper()
		var l listJSON
		d.cliJSON(t, &l, "task", "list", "--sort", "created")
		return l.Tasks
	}
	tasks := list()
	if len(tasks) != 36 {
		t.Fatalf("%d rows after 200 creates, want 36: a refused create leaves none", len(tasks))
	}
	checkQueue := func(tasks []taskJSON, running, pending []string) {
		t.Helper()
		byID := map[string]taskJSON{}
		for _, x := range tasks {
			byID[x.ID] = x
		}
		for _, id := range running {
			if x := byID[id]; x.Status != "running" || x.QueuePosition != 0 {
				t.Fatalf("task %s is %s at place %d, want running", id, x.Status, x.QueuePosition)
			}
		}
		for i, id := range pending {
			if x := byID[id]; x.Status != "pending" || x.QueuePosition != int64(i+1) {
				t.Fatalf("task %s is %s at place %d, want pending at %d", id, x.Status, x.QueuePosition, i+1)
			}
		}
	}
	ids := make([]string, len(tasks))
	for i, x := range tasks {
		ids[i] = x.ID
	}
	firstRun, queued := ids[:4], ids[4:]
	checkQueue(tasks, firstRun, queued)
	// The text list shows the places too.
	if out, _, code := d.cli(t, "task", "list", "--status", "pending", "--sort", "created"); code != 0 ||
		!strings.Contains(out, "pending #1") || !strings.Contains(out, "pending #32") {
		t.Fatalf("task list --status pending (exit %d):\n%s", code, out)
	}

	// A SIGKILLed daemon: the queue survives, the running four are
	// interrupted, and the restarted daemon starts the head of the queue.
	d.kill(t)
	d = startDaemon(t, data, cfg)
	testwait.Until(t, 30*time.Second, "the restarted daemon to start the head of the queue", func() bool {
		n := 0
		for _, x := range list() {
			if x.Status == "running" {
				n++
			}
		}
		return n == 4
	})
	tasks = list()
	byID := map[string]taskJSON{}
	for _, x := range tasks {
		byID[x.ID] = x
	}
	for _, id := range firstRun {
		if x := byID[id]; x.Status != "interrupted" || x.Reason != "host_restart" {
			t.Fatalf("task %s running at the kill is %s (%s), want interrupted (host_restart)", id, x.Status, x.Reason)
		}
	}
	checkQueue(tasks, queued[:4], queued[4:])

	// The gate opens: the queue drains, oldest first; the interrupted four
	// stay interrupted until resumed.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := func(want int) func() bool {
		return func() bool {
			var l listJSON
			d.cliJSON(t, &l, "task", "list", "--status", "completed")
			return len(l.Tasks) == want
		}
	}
	testwait.Until(t, 60*time.Second, "the queue to drain", done(32))
	for _, x := range list() {
		if x.Status == "interrupted" && x.Reason != "host_restart" {
			t.Fatalf("task %s is interrupted (%s)", x.ID, x.Reason)
		}
	}
	var resumed bulkJSON
	d.cliJSON(t, &resumed, "task", "resume", "--all")
	if len(resumed.Tasks) != 4 || len(resumed.Failed) != 0 {
		t.Fatalf("resume --all: %+v", resumed)
	}
	testwait.Until(t, 60*time.Second, "the resumed four to complete", done(36))

	// FIFO: the queued tasks started in the order they were created. Event
	// seqs are one sequence over every task.
	startSeq := func(id string) int64 {
		t.Helper()
		w := startWatch(t, d, id)
		if final, code := w.result(t); code != 0 || final.Status != "completed" {
			t.Fatalf("watch %s: exit %d, %+v", id, code, final)
		}
		var seq int64
		for _, l := range w.lines {
			if l.Kind == "event" && (l.Type == "task.started" || l.Type == "task.resumed") {
				seq = l.Seq
			}
		}
		return seq
	}
	seqs := make([]int64, len(queued))
	for i, id := range queued {
		seqs[i] = startSeq(id)
	}
	if !sort.SliceIsSorted(seqs, func(i, j int) bool { return seqs[i] < seqs[j] }) {
		t.Fatalf("queued tasks started out of creation order: start event seqs %v", seqs)
	}
}

// TestDaemonPauseAndBulk: task pause stops a running task's step in its
// plugin and leaves it interrupted (user_pause) until resumed; pause --all,
// resume --all and cancel --all act on every task of the caller, with
// Zara's reasons and their exit codes.
func TestDaemonPauseAndBulk(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, testexecConfig(t, work))
	marker := filepath.Join(work, "cancelled")
	a := createTask(t, d, work, map[string]any{"goal": "a", "testexec": map[string]any{"sleep_ms": 60000, "cancel_marker": marker}})
	b := createTask(t, d, work, map[string]any{"goal": "b", "testexec": map[string]any{"sleep_ms": 60000}})
	startWatch(t, d, a).until(t, event("step.started", 1))

	var v oneTask
	d.cliJSON(t, &v, "task", "pause", a)
	if v.Task.Status != "interrupted" || v.Task.Reason != "user_pause" {
		t.Fatalf("pause: %+v", v.Task)
	}
	if got := testwait.File(t, marker); !strings.HasPrefix(got, "cancelled attempt=1") {
		t.Fatalf("the paused step was not stopped in its plugin: %q", got)
	}
	var st statusJSON
	d.cliJSON(t, &st, "task", "status", a)
	if n := len(st.Attempts); n != 1 || st.Attempts[0].Status != "interrupted" || st.Attempts[0].Reason != "user_pause" {
		t.Fatalf("attempts after the pause: %+v", st.Attempts)
	}

	var bulk bulkJSON
	d.cliJSON(t, &bulk, "task", "pause", "--all")
	if len(bulk.Tasks) != 1 || bulk.Tasks[0].ID != b || bulk.Tasks[0].Reason != "user_pause" {
		t.Fatalf("pause --all: %+v", bulk)
	}
	bulk = bulkJSON{}
	d.cliJSON(t, &bulk, "task", "resume", "--all")
	if len(bulk.Tasks) != 2 || len(bulk.Failed) != 0 {
		t.Fatalf("resume --all: %+v", bulk)
	}
	for _, x := range bulk.Tasks {
		if x.Status != "running" || x.RunID != 2 {
			t.Fatalf("resumed %s: %s run %d, want running run 2", x.ID, x.Status, x.RunID)
		}
	}
	bulk = bulkJSON{}
	d.cliJSON(t, &bulk, "task", "cancel", "--all")
	if len(bulk.Tasks) != 2 {
		t.Fatalf("cancel --all: %+v", bulk)
	}
	for _, x := range bulk.Tasks {
		if x.Status != "cancelled" || x.Reason != "user_stop_all" {
			t.Fatalf("cancel --all left %s %s (%s)", x.ID, x.Status, x.Reason)
		}
	}
	// Nothing left to act on; a finished task cannot be paused.
	if _, errOut, code := d.cli(t, "task", "cancel", "--all"); code != 0 || !strings.Contains(errOut, "no tasks to cancel") {
		t.Fatalf("cancel --all with nothing left: exit %d, %s", code, errOut)
	}
	if _, _, code := d.cli(t, "task", "pause", a); code != 4 {
		t.Fatalf("pause of a cancelled task: exit %d, want 4", code)
	}
	if _, _, code := d.cli(t, "task", "pause", "--all-principals", "--all"); code != 7 {
		t.Fatalf("--all-principals from a non-admin: exit %d, want 7", code)
	}
}
