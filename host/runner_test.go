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

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

func TestCompletesAfterScriptedSteps(t *testing.T) {
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
	h := openHost(t, "", nil)
	task := create(t, h, alice, map[string]any{"steps": 5}, Limits{Steps: 2})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusFailed, store.ReasonStepBudgetExhausted)
	if task.Budgets.Steps.Used != 2 {
		t.Errorf("steps used = %d, want 2 (the limit)", task.Budgets.Steps.Used)
	}
}

func TestCreateValidation(t *testing.T) {
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
	// At the limits: accepted.
	atLimit := `{"goal":"` + strings.Repeat("é", 2000) + `","testexec":{"steps":1}}`
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

func TestConcurrencyLimitLeavesNoRow(t *testing.T) {
	h := openHost(t, "", nil)
	h.Runner.set.MaxConcurrent = 2
	dir := testwait.PluginDir(t)
	var running []store.Task
	for i := range 2 {
		running = append(running, create(t, h, alice, map[string]any{"sleep_ms": 60000, "cancel_marker": fmt.Sprintf("%s/c%d", dir, i)}, Limits{}))
	}
	_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "third", nil)})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("third create: err = %v, want ErrBusy", err)
	}
	tasks, err := h.Runner.List(context.Background(), alice, store.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 {
		t.Fatalf("%d rows, want 2: a refused create must leave no row", len(tasks))
	}
	for _, task := range running {
		if _, err := h.Runner.Cancel(context.Background(), alice, task.ID); err != nil {
			t.Fatal(err)
		}
	}
	// A slot is free again.
	task := create(t, h, alice, nil, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
}

func TestPrincipalIsolation(t *testing.T) {
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
	h := openHost(t, "", nil)
	ok := []File{{Name: "ctx.txt", Data: []byte("hello")}, {Name: "sub/dir/x.json", Data: []byte("{}")}}
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "seed", nil), Files: ok})
	if err != nil {
		t.Fatal(err)
	}
	waitEnd(t, h, alice, task.ID)
	got, err := os.ReadFile(filepath.Join(h.DataDir, WorkspaceDirName, task.ID, "sub/dir/x.json"))
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
