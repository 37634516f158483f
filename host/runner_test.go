package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

func TestCompletesAfterScriptedSteps(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	task := create(t, h, alice, map[string]any{"steps": 3}, Limits{})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusCompleted, "")
	if task.Budgets.Steps.Used != 3 {
		t.Errorf("steps used = %d, want 3", task.Budgets.Steps.Used)
	}
	if !bytes.Contains(task.Result, []byte(`"steps":3`)) {
		t.Errorf("result = %s, want the executor's result", task.Result)
	}
	atts, err := h.Runner.Attempts(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 3 || atts[2].Outcome != "complete" || atts[0].Outcome != "continue" {
		t.Fatalf("attempts = %+v", atts)
	}
	if task.RunID != 1 {
		t.Errorf("run id = %d, want 1", task.RunID)
	}
}

func TestStepBudgetExhausted(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	task := create(t, h, alice, map[string]any{"steps": 5}, Limits{Steps: 2})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusFailed, store.ReasonStepBudgetExhausted)
	if task.Budgets.Steps.Used != 2 {
		t.Errorf("steps used = %d, want 2 (the limit)", task.Budgets.Steps.Used)
	}
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	long := strings.Repeat("é", 2001)
	cases := []struct {
		name  string
		req   CreateRequest
		field string
	}{
		{"not json", CreateRequest{Spec: []byte("{")}, "spec"},
		{"not an object", CreateRequest{Spec: []byte(`["x"]`)}, "spec"},
		{"no goal", CreateRequest{Spec: []byte(`{}`)}, "spec.goal"},
		{"blank goal", CreateRequest{Spec: []byte(`{"goal":"  "}`)}, "spec.goal"},
		{"goal not a string", CreateRequest{Spec: []byte(`{"goal":3}`)}, "spec.goal"},
		{"goal past limit", CreateRequest{Spec: []byte(`{"goal":"` + long + `"}`)}, "spec.goal"},
		{"goal past limit once stripped", CreateRequest{Spec: []byte(`{"goal":"  ` + long + `\u001f"}`)}, "spec.goal"},
		{"goal of separators only", CreateRequest{Spec: []byte(`{"goal":"\u001c\u001d\u001e\u001f"}`)}, "spec.goal"},
		{"goal of separators and blanks", CreateRequest{Spec: []byte(`{"goal":" \u001c\t\u001f\u3000"}`)}, "spec.goal"},
		{"spec past limit", CreateRequest{Spec: []byte(`{"goal":"x","pad":"` + strings.Repeat("a", 16384) + `"}`)}, "spec"},
		{"steps above cap", CreateRequest{Spec: []byte(`{"goal":"x"}`), Limits: Limits{Steps: 201}}, "max_steps"},
		{"negative steps", CreateRequest{Spec: []byte(`{"goal":"x"}`), Limits: Limits{Steps: -1}}, "max_steps"},
		{"wall above cap", CreateRequest{Spec: []byte(`{"goal":"x"}`), Limits: Limits{WallSeconds: 86401}}, "max_wall_seconds"},
		{"depth above cap", CreateRequest{Spec: []byte(`{"goal":"x"}`), Limits: Limits{Depth: 5}}, "max_depth"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Executor = "testexec"
			_, err := h.Runner.Create(context.Background(), alice, tc.req)
			var fe *plugin.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want a plugin.FieldError on %s", err, tc.field)
			}
		})
	}
	// At the limits: accepted; blanks and separators around the goal are
	// not counted (Zara strips it first).
	atLimit := `{"goal":"  \u001c` + strings.Repeat("é", 2000) + `\u001f \n","testexec":{"steps":1}}`
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: []byte(atLimit), Limits: Limits{Steps: 200, WallSeconds: 86400, Depth: 4}})
	if err != nil {
		t.Fatalf("create at the limits: %v", err)
	}
	waitEnd(t, h, alice, task.ID)
	tasks, err := h.Runner.List(context.Background(), alice, store.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 {
		t.Fatalf("%d task rows after %d refused creates and one good one, want 1", len(tasks), len(cases))
	}
}

// TestQueueBeyondConcurrency: beyond max_concurrent a create waits in the
// queue (pending, FIFO), beyond max_queued it is refused and leaves no
// row, and a freed slot starts the head of the queue, not another.
func TestQueueBeyondConcurrency(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	h.Runner.setLimits(2, 2)
	ctx := context.Background()
	dir := testwait.PluginDir(t)
	sleeper := func(i int) map[string]any {
		return map[string]any{"sleep_ms": 60000, "cancel_marker": fmt.Sprintf("%s/c%d", dir, i)}
	}
	var running, queued []store.Task
	for i := range 2 {
		task := create(t, h, alice, sleeper(i), Limits{})
		wantStatus(t, task, store.StatusRunning, "")
		running = append(running, task)
	}
	for i := range 2 {
		task := create(t, h, alice, sleeper(2+i), Limits{})
		wantStatus(t, task, store.StatusPending, "")
		queued = append(queued, task)
	}
	_, err := h.Runner.Create(ctx, alice, CreateRequest{Executor: "testexec", Spec: spec(t, "third", nil)})
	var qe *store.QueueFullError
	if !errors.As(err, &qe) || qe.Limit != 2 {
		t.Fatalf("create past the queue: err = %v, want a QueueFullError at 2", err)
	}
	tasks, err := h.Runner.List(ctx, alice, store.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 4 {
		t.Fatalf("%d rows, want 4: a refused create must leave no row", len(tasks))
	}
	if _, err := h.Runner.Cancel(ctx, alice, running[0].ID); err != nil {
		t.Fatal(err)
	}
	status := func(id string) store.Status {
		task, err := h.Runner.Get(ctx, alice, id)
		if err != nil {
			t.Fatal(err)
		}
		return task.Status
	}
	testwait.Until(t, 10*time.Second, "the head of the queue starts", func() bool { return status(queued[0].ID) == store.StatusRunning })
	if st := status(queued[1].ID); st != store.StatusPending {
		t.Fatalf("second queued task is %s with one slot freed, want pending", st)
	}
	for _, id := range []string{running[1].ID, queued[0].ID} {
		if _, err := h.Runner.Cancel(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 10*time.Second, "the second queued task starts", func() bool { return status(queued[1].ID) == store.StatusRunning })
	if _, err := h.Runner.Cancel(ctx, alice, queued[1].ID); err != nil {
		t.Fatal(err)
	}
	task := create(t, h, alice, nil, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
}

func TestPrincipalIsolation(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	ctx := context.Background()
	var mu sync.Mutex
	ids := map[string][]string{}
	var wg sync.WaitGroup
	for _, p := range []string{alice, bob} {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				task, err := h.Runner.Create(ctx, p, CreateRequest{Executor: "testexec", Spec: spec(t, "isolated", map[string]any{"steps": 2})})
				if err != nil {
					t.Errorf("create for %s: %v", p, err)
					return
				}
				mu.Lock()
				ids[p] = append(ids[p], task.ID)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for p, list := range ids {
		for _, id := range list {
			wantStatus(t, waitEnd(t, h, p, id), store.StatusCompleted, "")
		}
	}
	other := map[string]string{alice: bob, bob: alice}
	for p, list := range ids {
		tasks, err := h.Runner.List(ctx, p, store.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != 8 {
			t.Errorf("%s lists %d tasks, want 8", p, len(tasks))
		}
		for _, task := range tasks {
			if task.PrincipalID != p {
				t.Errorf("%s sees task %s of %s", p, task.ID, task.PrincipalID)
			}
		}
		for _, id := range list {
			q := other[p]
			if _, err := h.Runner.Get(ctx, q, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s gets %s's task: err = %v, want not found", q, p, err)
			}
			if _, err := h.Runner.Cancel(ctx, q, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s cancels %s's task: err = %v, want not found", q, p, err)
			}
			if _, err := h.Runner.Resume(ctx, q, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s resumes %s's task: err = %v, want not found", q, p, err)
			}
			if _, err := h.Runner.Attempts(ctx, q, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s reads attempts of %s's task: err = %v, want not found", q, p, err)
			}
		}
	}
	// A foreign task and a missing one answer alike.
	_, errForeign := h.Runner.Get(ctx, bob, ids[alice][0])
	_, errMissing := h.Runner.Get(ctx, bob, "t_doesnotexist")
	if strings.ReplaceAll(errForeign.Error(), ids[alice][0], "ID") != strings.ReplaceAll(errMissing.Error(), "t_doesnotexist", "ID") {
		t.Errorf("foreign task error %q differs from missing task error %q", errForeign, errMissing)
	}
}

func TestTasksDisabledRefusesWork(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", func(c *config.Config) { c.Tasks.Enabled = false })
	_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "x", nil)})
	if !errors.Is(err, ErrDisabled) {
		t.Fatalf("create while disabled: %v", err)
	}
	if tasks, _ := h.Runner.List(context.Background(), alice, store.ListQuery{}); len(tasks) != 0 {
		t.Fatalf("a refused create left %d rows", len(tasks))
	}
}

func TestCreateSeedsWorkspace(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	ok := []File{{Name: "ctx.txt", Data: []byte("hello")}, {Name: "sub/dir/x.json", Data: []byte("{}")}}
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "seed", nil), Files: ok})
	if err != nil {
		t.Fatal(err)
	}
	waitEnd(t, h, alice, task.ID)
	got, err := os.ReadFile(filepath.Join(h.DataDir, datadir.WorkspaceDirName, task.ID, "sub/dir/x.json"))
	if err != nil || string(got) != "{}" {
		t.Fatalf("seeded file: %q %v", got, err)
	}
	big := make([]byte, maxSeedBytes)
	for _, tc := range []struct {
		name  string
		files []File
		field string
	}{
		{"escape", []File{{Name: "../x"}}, "files[0].name"},
		{"absolute", []File{{Name: "/etc/passwd"}}, "files[0].name"},
		{"unclean", []File{{Name: "a//b"}}, "files[0].name"},
		{"twice", []File{{Name: "a"}, {Name: "a"}}, "files[1].name"},
		{"past the size", []File{{Name: "a", Data: big}, {Name: "b", Data: []byte("x")}}, "files"},
		{"too many", make([]File, maxSeedFiles+1), "files"},
	} {
		_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "x", nil), Files: tc.files})
		var fe *plugin.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err = %v, want a plugin.FieldError on %s", tc.name, err, tc.field)
		}
	}
	// At the size limit: accepted.
	atLimit, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "x", nil), Files: []File{{Name: "a", Data: big}}})
	if err != nil {
		t.Fatalf("files at the limit: %v", err)
	}
	waitEnd(t, h, alice, atLimit.ID)
	if tasks, _ := h.Runner.List(context.Background(), alice, store.ListQuery{}); len(tasks) != 2 {
		t.Fatalf("%d rows, want 2: refused creates must leave none", len(tasks))
	}
}

// TestResumeQueues: a resume with every slot taken queues the task
// (task.queued, pending, run id unchanged); its start in turn is the
// resume (task.resumed, run id + 1).
func TestResumeQueues(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	h.Runner.setLimits(1, 0)
	ctx := context.Background()
	crashed := create(t, h, alice, map[string]any{"exit_at_attempt": 1}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, crashed.ID), store.StatusInterrupted, store.ReasonExecutorCrashed)
	busy := create(t, h, alice, map[string]any{"sleep_ms": 60000}, Limits{})
	wantStatus(t, busy, store.StatusRunning, "")
	q, err := h.Runner.Resume(ctx, alice, crashed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if q.Status != store.StatusPending || q.RunID != 1 {
		t.Fatalf("resume with no free slot: %s run %d, want pending run 1", q.Status, q.RunID)
	}
	if again, err := h.Runner.Resume(ctx, alice, crashed.ID); err != nil || again.Status != store.StatusPending {
		t.Fatalf("resume of the queued task: %v, %v; want it left pending", again.Status, err)
	}
	if _, err := h.Runner.Cancel(ctx, alice, busy.ID); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the queued resume starts", func() bool {
		task, err := h.Runner.Get(ctx, alice, crashed.ID)
		return err == nil && task.RunID == 2
	})
	done := waitEnd(t, h, alice, crashed.ID)
	wantStatus(t, done, store.StatusCompleted, "")
	evs, err := h.Store.Events(ctx, alice, crashed.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		if e.Type == EventTaskQueued || e.Type == EventTaskResumed || e.Type == EventTaskStarted {
			types = append(types, e.Type)
		}
	}
	if want := []string{EventTaskStarted, EventTaskQueued, EventTaskResumed}; fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
}

// TestSoloHostLeavesTheQueue: a foreground host (taskhost run) starts the
// task it is asked to at once and none of the queue's.
func TestSoloHostLeavesTheQueue(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	ctx := context.Background()
	daemon := openHost(t, dir, func(c *config.Config) { c.Tasks.MaxConcurrent = 1 })
	busy := create(t, daemon, alice, map[string]any{"sleep_ms": 60000}, Limits{})
	queued := create(t, daemon, alice, nil, Limits{})
	wantStatus(t, queued, store.StatusPending, "")
	if err := daemon.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	solo := openHostWith(t, Options{DataDir: dir, Config: cfg, Solo: true})
	mine := create(t, solo, alice, nil, Limits{})
	wantStatus(t, mine, store.StatusRunning, "")
	wantStatus(t, waitEnd(t, solo, alice, mine.ID), store.StatusCompleted, "")
	for _, id := range []string{busy.ID, queued.ID} {
		got, err := solo.Runner.Get(ctx, alice, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.RunID > 1 || (id == queued.ID && got.Status != store.StatusPending) {
			t.Fatalf("the solo host touched %s: %s run %d", id, got.Status, got.RunID)
		}
	}
}
