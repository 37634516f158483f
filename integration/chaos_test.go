package integration

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
)

// The chaos suite: a seeded, randomized workload of tasks on several
// executors, with the plugin and the host SIGKILLed (or stopped) at random
// points, restarts and resumes, checking the store's promises after every
// round. TASKHOST_CHAOS_ROUNDS sets the number of rounds (default 16),
// TASKHOST_CHAOS_SEED replays a run.
//
// Serial: its orphan check counts every executor of this binary whose host is
// gone, which a parallel test's killed host leaves for a moment.
func TestChaos(t *testing.T) {
	rounds := envInt(t, "TASKHOST_CHAOS_ROUNDS", 16)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TASKHOST_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TASKHOST_CHAOS_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("chaos seed %d (replay: TASKHOST_CHAOS_SEED=%d TASKHOST_CHAOS_ROUNDS=%d)", seed, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := &chaos{t: t, rng: rng, data: testwait.ShortTempDir(t), work: testwait.ShortTempDir(t), seen: map[string]taskView{}, faults: map[string]int{}}
	// Its last round's host may have been killed, leaving run dirs.
	t.Cleanup(func() { datadir.SweepRunDirs(c.data) })
	c.config = filepath.Join(c.work, "taskhost.toml")
	if err := os.WriteFile(c.config, []byte("[machine_spirit]\nenabled = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range rounds {
		c.round(i)
		c.check(i)
	}
	c.report()
}

type taskView struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	RunID   int64  `json:"run_id"`
	Budgets map[string]struct {
		Used  int64 `json:"used"`
		Limit int64 `json:"limit"`
	} `json:"budgets"`
}

type chaos struct {
	t          *testing.T
	rng        *rand.Rand
	data, work string
	config     string
	seen       map[string]taskView // by id, as of the last check
	created    int
	faults     map[string]int
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s = %q: want a positive integer", name, s)
	}
	return v
}

// round starts a task or resumes an interrupted one, injects one fault at a
// random moment, and waits for the host to end.
func (c *chaos) round(i int) {
	t := c.t
	args := []string{"run", "--data-dir", c.data, "--config", c.config, "--approve-all", "--json"}
	var resumable []string
	for id, v := range c.seen {
		if v.Status == "interrupted" {
			resumable = append(resumable, id)
		}
	}
	if len(resumable) > 0 && c.rng.IntN(3) == 0 {
		id := resumable[c.rng.IntN(len(resumable))]
		args = append(args, "--resume", id)
		c.faults["resumes"]++
	} else {
		args = append(args, c.newTask(i)...)
		c.created++
	}
	cmd := exec.Command(filepath.Join(binDir, "taskhost"), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Faults land after the task is running (its first line is out) at a
	// random moment of its run; a host that ends first takes none.
	running := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), `"kind":"task"`) {
				close(running)
				once = true
			}
		}
		if !once {
			close(running)
		}
	}()
	exited := make(chan struct{})
	go func() { <-running; cmd.Wait(); close(exited) }()
	select {
	case <-running:
	case <-time.After(60 * time.Second):
		t.Fatalf("round %d: no task after 60 s", i)
	}
	delay := time.Duration(c.rng.IntN(500)) * time.Millisecond
	faults := []string{"none", "kill-plugin", "kill-plugin", "kill-plugin", "kill-worker", "kill-host", "kill-host", "stop-host"}
	fault := faults[c.rng.IntN(len(faults))]
	select {
	case <-exited:
		fault = "none (ended first)"
	case <-time.After(delay):
		switch fault {
		case "kill-plugin":
			if pid := childPlugin(cmd.Process.Pid); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			} else {
				fault = "none (no plugin yet)"
			}
		case "kill-worker":
			// A machinespirit plugin's swipl worker; other executors
			// have none, and then the plugin itself goes.
			plugin := childPlugin(cmd.Process.Pid)
			if w := childNamed(plugin, "swipl"); w > 0 {
				syscall.Kill(w, syscall.SIGKILL)
			} else if plugin > 0 {
				syscall.Kill(plugin, syscall.SIGKILL)
				fault = "kill-plugin"
			} else {
				fault = "none (no plugin yet)"
			}
		case "kill-host":
			cmd.Process.Signal(syscall.SIGKILL)
		case "stop-host":
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	c.faults[fault]++
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("round %d: host did not end within 60 s after %s", i, fault)
	}
}

// newTask picks an executor and a spec for a new task.
func (c *chaos) newTask(i int) []string {
	switch c.rng.IntN(4) {
	case 0:
		return []string{"--executor", "legacy", "--goal", fmt.Sprintf("chaos task %d", i)}
	case 1:
		spec, err := filepath.Abs("../examples/machinespirit/plan-act-review.json")
		if err != nil {
			c.t.Fatal(err)
		}
		return []string{"--executor", "machinespirit", "--spec-file", spec}
	}
	te := map[string]any{"steps": 3 + c.rng.IntN(5), "sleep_ms": 40 + c.rng.IntN(200)}
	spec, _ := json.Marshal(map[string]any{"goal": fmt.Sprintf("chaos task %d", i), "testexec": te})
	path := filepath.Join(c.work, fmt.Sprintf("spec%d.json", i))
	if err := os.WriteFile(path, spec, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return []string{"--executor", "testexec", "--spec-file", path, "--max-steps", strconv.Itoa(3 + c.rng.IntN(6))}
}

// childNamed finds a child of parent whose command line contains name.
func childNamed(parent int, name string) int {
	if parent <= 0 {
		return 0
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), name) && ppidOK(pid) == parent {
			return pid
		}
	}
	return 0
}

// childPlugin finds an executor plugin whose parent is host.
func childPlugin(host int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "taskhost-executor-") && ppidOK(pid) == host {
			return pid
		}
	}
	return 0
}

// check asserts the invariants after a round.
func (c *chaos) check(round int) {
	t := c.t
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("round %d: "+format, append([]any{round}, args...)...)
	}
	// No plugin outlives its host.
	deadline := time.Now().Add(5 * time.Second)
	for {
		orphans := orphanPlugins()
		if len(orphans) == 0 {
			break
		}
		if time.Now().After(deadline) {
			fail("orphan plugin processes %v", orphans)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, errOut, code := taskhost(t, "inspect", "--data-dir", c.data, "--json")
	if code != 0 {
		fail("inspect: %s", errOut)
	}
	var list struct {
		Tasks []taskView `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		fail("inspect output: %v", err)
	}
	// A host killed before its create committed leaves no row; a row once
	// seen never disappears, and no round adds more than one.
	present := map[string]bool{}
	for _, v := range list.Tasks {
		present[v.ID] = true
	}
	for id := range c.seen {
		if !present[id] {
			fail("task %s was lost", id)
		}
	}
	if len(list.Tasks) > c.created || len(list.Tasks) > len(c.seen)+1 {
		fail("%d task rows after %d creates (%d seen before): a row was invented", len(list.Tasks), c.created, len(c.seen))
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(c.data, "taskhost.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		fail("%v", err)
	}
	defer db.Close()
	var integrity string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		fail("integrity_check: %q %v", integrity, err)
	}
	for _, v := range list.Tasks {
		prev, had := c.seen[v.ID]
		for name, b := range v.Budgets {
			if name != "wall_ms" && b.Used > b.Limit {
				fail("task %s: %s %d/%d past its limit", v.ID, name, b.Used, b.Limit)
			}
			if had && b.Used < prev.Budgets[name].Used {
				fail("task %s: %s went backwards %d → %d", v.ID, name, prev.Budgets[name].Used, b.Used)
			}
			if had && b.Limit != prev.Budgets[name].Limit {
				fail("task %s: %s limit changed %d → %d", v.ID, name, prev.Budgets[name].Limit, b.Limit)
			}
		}
		if had && v.RunID < prev.RunID {
			fail("task %s: run id went backwards", v.ID)
		}
		switch v.Status {
		case "completed":
			var outcome string
			db.QueryRow(`SELECT outcome FROM attempts WHERE task_id = ? AND status = 'completed' ORDER BY number DESC LIMIT 1`, v.ID).Scan(&outcome)
			if outcome != "complete" {
				fail("task %s completed but its last completed attempt's outcome is %q", v.ID, outcome)
			}
		case "running", "waiting_approval":
			// Only a SIGKILLed host leaves these; the next host recovers
			// them (checked when the task next shows up).
		case "failed", "cancelled", "interrupted":
		default:
			fail("task %s in status %q", v.ID, v.Status)
		}
		var events int
		db.QueryRow(`SELECT count(*) FROM events WHERE task_id = ?`, v.ID).Scan(&events)
		if events > 500 {
			fail("task %s keeps %d events, bound 500", v.ID, events)
		}
		if had && prev.Status != v.Status && isTerminal(prev.Status) {
			fail("task %s left terminal status %s for %s", v.ID, prev.Status, v.Status)
		}
		c.seen[v.ID] = v
	}
}

func isTerminal(s string) bool { return s == "completed" || s == "failed" || s == "cancelled" }

// orphanPlugins lists executor plugins of this test's binaries whose host is gone.
func orphanPlugins() []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !strings.HasPrefix(string(cmdline), filepath.Join(binDir, "taskhost-executor-")) || !alive(pid) {
			continue
		}
		parent := ppidOK(pid)
		pcmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", parent))
		if !strings.HasPrefix(string(pcmd), filepath.Join(binDir, "taskhost")) {
			out = append(out, pid)
		}
	}
	return out
}

func (c *chaos) report() {
	statuses := map[string]int{}
	for _, v := range c.seen {
		statuses[v.Status]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-22s %6s\n", "fault", "count")
	for _, k := range []string{"kill-plugin", "kill-worker", "kill-host", "stop-host", "none", "none (ended first)", "none (no plugin yet)", "resumes"} {
		fmt.Fprintf(&b, "%-22s %6d\n", k, c.faults[k])
	}
	fmt.Fprintf(&b, "tasks: %d created, by status %v\n", c.created, statuses)
	c.t.Log(b.String())
}
