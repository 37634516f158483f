package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// naiveCommand is logical call {n} of the naive executor: it counts its
// runs in the workspace and, on its first run only, marks itself in flight
// and stays running, for the test to kill its host under it. A re-run (an
// approved retry) returns at once.
const naiveCommand = "echo {n} >> count; if [ ! -e started-{n} ]; then touch started-{n} inflight; sleep 30; fi"

var countLine = regexp.MustCompile(`echo (\d+) >> count`)

// naiveClient is a daemon's task and approval services over its socket.
type naiveClient struct {
	tasks     apipb.TaskServiceClient
	approvals apipb.ApprovalServiceClient
}

func dialDaemon(t *testing.T, d *daemon) naiveClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return naiveClient{apipb.NewTaskServiceClient(conn), apipb.NewApprovalServiceClient(conn)}
}

// naiveTask is one task of the naive executor.
type naiveTask struct {
	id, pidFile string
	// retries counts the approved retries of each logical call (the
	// approvals whose prompt says the call may already have run once).
	retries map[int]int
}

// poll is testwait.Until for a goroutine: an error instead of t.Fatal.
func poll(d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// inflight waits for the task's logical call to be running in ws and
// clears the mark.
func inflight(ws string) error {
	mark := filepath.Join(ws, "inflight")
	// The running command's own view of its workspace has it: its
	// writes reach the workspace when it ends.
	if err := poll(30*time.Second, "a call in flight in "+ws, func() (bool, error) {
		_, err := testwait.ReadLive(mark)
		return err == nil, nil
	}); err != nil {
		return err
	}
	return testwait.RemoveLive(mark)
}

func waitStatus(ctx context.Context, c naiveClient, id, want string) error {
	return poll(30*time.Second, "task "+id+" to be "+want, func() (bool, error) {
		r, err := c.tasks.GetTask(ctx, &apipb.GetTaskRequest{TaskId: id, AttemptsLimit: 1})
		if err != nil {
			return false, err
		}
		return r.Task.Status == want, nil
	})
}

func killPid(pidFile string) error {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("pid file %s: %q", pidFile, data)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// approveAll approves every pending approval of c until stop is closed,
// counting each retry approval (its prompt says the call may already have
// run once) against its task's logical call.
func approveAll(ctx context.Context, c naiveClient, tasks map[string]*naiveTask, mu *sync.Mutex, stop <-chan struct{}) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		r, err := c.approvals.ListApprovals(ctx, &apipb.ListApprovalsRequest{Status: "pending"})
		if err != nil {
			return err
		}
		for _, a := range r.Approvals {
			m := countLine.FindStringSubmatch(a.Prompt)
			if m == nil {
				return fmt.Errorf("approval %s: prompt %q names no logical call", a.Id, a.Prompt)
			}
			if _, err := c.approvals.Approve(ctx, &apipb.ResolveApprovalRequest{ApprovalId: a.Id}); err != nil {
				return fmt.Errorf("approve %s: %w", a.Id, err)
			}
			if strings.Contains(a.Prompt, "may already have run once") {
				n, _ := strconv.Atoi(m[1])
				mu.Lock()
				tasks[a.TaskId].retries[n]++
				mu.Unlock()
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// naiveStats are the test's figures.
type naiveStats struct {
	mu                            sync.Mutex
	pluginKills, hostKills, moved int
	approvedRetries, calls        int
}

func (s *naiveStats) add(f func(*naiveStats)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

func (s *naiveStats) cycles() int { return s.pluginKills + s.hostKills + s.moved }

// checkCounts requires every logical call of task to have run at most once
// plus once per approved retry, summing its runs over the workspaces ws.
func checkCounts(t *testing.T, task *naiveTask, st *naiveStats, ws ...string) {
	t.Helper()
	runs := map[int]int{}
	for _, w := range ws {
		data, err := os.ReadFile(filepath.Join(w, "count"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(data)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("task %s: count line %q", task.id, f)
			}
			runs[n]++
		}
	}
	if len(runs) == 0 {
		t.Fatalf("task %s: no call ran", task.id)
	}
	for n, got := range runs {
		// Fewer is no re-run: a command killed with its daemon leaves no
		// write behind (its overlay dies with it, docs/security.md "Disk").
		if want := 1 + task.retries[n]; got > want {
			t.Errorf("task %s: logical call %d ran %d times, want %d (1 + %d approved retries): a re-run without an approval",
				task.id, n, got, want, task.retries[n])
		}
		st.add(func(s *naiveStats) { s.calls++; s.approvedRetries += task.retries[n] })
	}
}

func naiveSpec(t *testing.T, work, pidFile string) string {
	t.Helper()
	return writeSpec(t, work, map[string]any{"goal": "naive", "testexec": map[string]any{
		"steps": 1000, "pid_file": pidFile, "naive_memory": pidFile + ".naive",
		"naive_call": map[string]any{"name": "shell.run", "args": map[string]any{"command": naiveCommand}},
	}})
}

func naiveCreate(ctx context.Context, t *testing.T, c naiveClient, work string, i int) *naiveTask {
	t.Helper()
	pidFile := filepath.Join(work, fmt.Sprintf("pid-%d", i))
	spec, err := os.ReadFile(naiveSpec(t, work, pidFile))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.tasks.CreateTask(ctx, &apipb.CreateTaskRequest{Executor: "testexec", Spec: spec,
		Limits: &apipb.Limits{MaxSteps: 200, MaxToolCalls: 200}})
	if err != nil {
		t.Fatal(err)
	}
	return &naiveTask{id: r.Task.Id, pidFile: pidFile, retries: map[int]int{}}
}

// pluginKillCycles drives one task through cycles crash/resume cycles: its
// logical call in flight, its plugin SIGKILLed, the task resumed; then it
// cancels the task once the next call is in flight.
func pluginKillCycles(ctx context.Context, c naiveClient, task *naiveTask, ws string, cycles int, st *naiveStats) error {
	for i := range cycles {
		if err := inflight(ws); err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
		if err := killPid(task.pidFile); err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
		if err := waitStatus(ctx, c, task.id, "interrupted"); err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
		if _, err := c.tasks.ResumeTask(ctx, &apipb.ResumeTaskRequest{TaskId: task.id}); err != nil {
			return fmt.Errorf("cycle %d: resume: %w", i, err)
		}
		st.add(func(s *naiveStats) { s.pluginKills++ })
	}
	if err := inflight(ws); err != nil {
		return err
	}
	_, err := c.tasks.CancelTask(ctx, &apipb.CancelTaskRequest{TaskId: task.id})
	return err
}

func naiveConfig(t *testing.T, work, policy string) string {
	t.Helper()
	return writeConfig(t, testwait.ShortTempDir(t), fmt.Sprintf("[executors.testexec]\npath = %q\nread_write = [%q]\n\n"+
		"[tasks]\nmax_concurrent = 32\n\n[tools.\"shell.run\"]\napproval = %q\ntimeout_seconds = 600\n", filepath.Join(binDir, "taskhost-executor-testexec"), work, policy))
}

// runPluginKills runs tasks × cycles plugin-kill cycles on one SQLite
// daemon whose shell.run policy is policy, approving every approval, and
// checks every task's counts.
func runPluginKills(t *testing.T, policy string, tasks, cycles int, st *naiveStats) {
	ctx := context.Background()
	work, data := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, naiveConfig(t, work, policy))
	c := dialDaemon(t, d)
	all := map[string]*naiveTask{}
	var list []*naiveTask
	for i := range tasks {
		task := naiveCreate(ctx, t, c, work, i)
		all[task.id] = task
		list = append(list, task)
	}
	var mu sync.Mutex
	stop := make(chan struct{})
	approver := make(chan error, 1)
	go func() { approver <- approveAll(ctx, c, all, &mu, stop) }()
	errs := make([]error, len(list))
	var wg sync.WaitGroup
	for i, task := range list {
		wg.Go(func() {
			errs[i] = pluginKillCycles(ctx, c, task, filepath.Join(data, "workspaces", task.id), cycles, st)
		})
	}
	wg.Wait()
	close(stop)
	if err := errors.Join(append(errs, <-approver)...); err != nil {
		t.Fatal(err)
	}
	asked, err := c.approvals.ListApprovals(ctx, &apipb.ListApprovalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if policy == "never" && len(asked.Approvals) != 0 {
		t.Errorf("%d approvals asked under approval = \"never\"", len(asked.Approvals))
	}
	for _, task := range list {
		checkCounts(t, task, st, filepath.Join(data, "workspaces", task.id))
		if policy == "never" && len(task.retries) != 0 {
			t.Errorf("task %s: retries approved under approval = \"never\": %v", task.id, task.retries)
		}
	}
	var v statusJSON
	d.cliJSON(t, &v, "task", "status", list[0].id)
	open := 0
	for _, e := range v.Unsettled {
		if e.Resolution == "unsettled" {
			open++
		}
	}
	if policy == "never" && open < cycles {
		t.Errorf("task status lists %d unresolved effects after %d crashes under approval = \"never\": %+v", open, cycles, v.Unsettled)
	}
}

// A naive executor re-issues every call the host tells it is unsettled,
// whatever happened; shell.run counts its runs in the workspace. Over
// hundreds of crash/resume cycles — the plugin SIGKILLed mid-call, the
// `taskhost serve` daemon SIGKILLed mid-call and restarted, a host of a
// PostgreSQL fleet SIGKILLed and the task resumed on another — no call
// ever runs again without an approval: each logical call ran once, plus
// once per approved retry, and none under approval = "never".
func TestNaiveExecutorNeverRerunsUnsettled(t *testing.T) {
	t.Parallel()
	start := time.Now()
	st := &naiveStats{}
	t.Run("plugin killed, approval never", func(t *testing.T) { runPluginKills(t, "never", 10, 22, st) })
	t.Run("plugin killed, approval always", func(t *testing.T) { runPluginKills(t, "always", 4, 10, st) })
	t.Run("daemon killed", func(t *testing.T) { runHostKills(t, 10, 5, st) })
	t.Run("fleet host killed, resumed on another", func(t *testing.T) { runFleetMoves(t, 6, st) })
	t.Logf("%d crash/resume cycles (%d plugin SIGKILLs, %d daemon SIGKILLs and restarts, %d resumes on another fleet host) "+
		"over %d logical calls, %d approved retries, 0 re-runs without an approval, in %v",
		st.cycles(), st.pluginKills, st.hostKills, st.moved, st.calls, st.approvedRetries, time.Since(start).Round(time.Millisecond))
	if !t.Failed() && st.cycles() < 300 {
		t.Errorf("%d cycles, want at least 300", st.cycles())
	}
}

// runHostKills SIGKILLs the daemon rounds times with every task's call in
// flight, restarts it and resumes the tasks.
func runHostKills(t *testing.T, tasks, rounds int, st *naiveStats) {
	ctx := context.Background()
	work, data := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	cfg := naiveConfig(t, work, "never")
	d := startDaemon(t, data, cfg)
	c := dialDaemon(t, d)
	var list []*naiveTask
	for i := range tasks {
		list = append(list, naiveCreate(ctx, t, c, work, i))
	}
	ws := func(task *naiveTask) string { return filepath.Join(data, "workspaces", task.id) }
	for r := range rounds {
		for _, task := range list {
			if err := inflight(ws(task)); err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		d.kill(t)
		d = startDaemon(t, data, cfg)
		c = dialDaemon(t, d)
		for _, task := range list {
			if err := waitStatus(ctx, c, task.id, "interrupted"); err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
			if _, err := c.tasks.ResumeTask(ctx, &apipb.ResumeTaskRequest{TaskId: task.id}); err != nil {
				t.Fatalf("round %d: resume: %v", r, err)
			}
			st.add(func(s *naiveStats) { s.hostKills++ })
		}
	}
	for _, task := range list {
		if err := inflight(ws(task)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.tasks.CancelTask(ctx, &apipb.CancelTaskRequest{TaskId: task.id}); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, task, st, ws(task))
	}
}

// runFleetMoves creates tasks on host A of a PostgreSQL fleet, SIGKILLs A
// with their calls in flight, and resumes them on B once B has swept A.
func runFleetMoves(t *testing.T, tasks int, st *naiveStats) {
	ctx := context.Background()
	work, hs := startFleet(t, "\n[tasks]\nmax_concurrent = 32\n\n[tools.\"shell.run\"]\napproval = \"never\"\ntimeout_seconds = 600\n", "host-a", "host-b")
	a, b := hs[0], hs[1]
	ca, cb := dialDaemon(t, a), dialDaemon(t, b)
	var list []*naiveTask
	for i := range tasks {
		list = append(list, naiveCreate(ctx, t, ca, work, i))
	}
	wsOn := func(d *daemon, task *naiveTask) string { return filepath.Join(d.dataDir, "workspaces", task.id) }
	for _, task := range list {
		if err := inflight(wsOn(a, task)); err != nil {
			t.Fatal(err)
		}
	}
	a.kill(t)
	for _, task := range list {
		if err := waitStatus(ctx, cb, task.id, "interrupted"); err != nil {
			t.Fatal(err)
		}
		if _, err := cb.tasks.ResumeTask(ctx, &apipb.ResumeTaskRequest{TaskId: task.id}); err != nil {
			t.Fatalf("resume on B: %v", err)
		}
		st.add(func(s *naiveStats) { s.moved++ })
	}
	for _, task := range list {
		if err := inflight(wsOn(b, task)); err != nil {
			t.Fatal(err)
		}
		if _, err := cb.tasks.CancelTask(ctx, &apipb.CancelTaskRequest{TaskId: task.id}); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, task, st, wsOn(a, task), wsOn(b, task))
	}
}
