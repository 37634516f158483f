package store

import (
	"context"
	"errors"
	"testing"
)

// Usage adds up by attempt and in all, stays with its principal, refuses a
// count out of range without writing, and goes with the task.
func TestModelUsage(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx := context.Background()
	task := createTask(t, s, "alice", "usage-task")
	if total, by, err := s.TaskModelUsage(ctx, "alice", task.ID); err != nil || total != (ModelUsage{}) || len(by) != 0 {
		t.Fatalf("usage of a task without calls = %+v %v, %v", total, by, err)
	}
	for _, u := range []struct {
		attempt int64
		u       ModelUsage
	}{
		{1, ModelUsage{Calls: 1, PromptTokens: 1091, CompletionTokens: 45, Millis: 1200}},
		{1, ModelUsage{Calls: 1, PromptTokens: 1200, CompletionTokens: 10, Millis: 800}},
		{2, ModelUsage{Calls: 1, PromptTokens: 900, CompletionTokens: 2047, Millis: 60000}},
	} {
		if err := s.AddModelUsage(ctx, "alice", task.ID, u.attempt, u.u); err != nil {
			t.Fatal(err)
		}
	}
	total, by, err := s.TaskModelUsage(ctx, "alice", task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ModelUsage{Calls: 3, PromptTokens: 3191, CompletionTokens: 2102, Millis: 62000}); total != want {
		t.Errorf("total %+v, want %+v", total, want)
	}
	if want := (ModelUsage{Calls: 2, PromptTokens: 2291, CompletionTokens: 55, Millis: 2000}); by[1] != want || len(by) != 2 {
		t.Errorf("by attempt %+v", by)
	}
	if _, _, err := s.TaskModelUsage(ctx, "bob", task.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another principal's usage: %v, want ErrNotFound", err)
	}
	if err := s.AddModelUsage(ctx, "bob", task.ID, 1, ModelUsage{Calls: 1}); !errors.Is(err, ErrNotFound) {
		t.Errorf("adding to another principal's task: %v, want ErrNotFound", err)
	}
	for _, bad := range []ModelUsage{{Calls: -1}, {PromptTokens: maxUsageAdd + 1}, {Millis: -5}} {
		if err := s.AddModelUsage(ctx, "alice", task.ID, 1, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddModelUsage(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.AddModelUsage(ctx, "alice", task.ID, 1, ModelUsage{PromptTokens: maxUsageAdd}); err != nil {
		t.Errorf("a count at the bound: %v", err)
	}
	if err := s.AddModelUsage(ctx, "alice", task.ID, 0, ModelUsage{Calls: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("attempt 0: %v, want ErrInvalid", err)
	}
	if after, _, _ := s.TaskModelUsage(ctx, "alice", task.ID); after.Calls != 3 || after.PromptTokens != 3191+maxUsageAdd {
		t.Errorf("a refused addition wrote something: %+v", after)
	}
	if _, err := s.Cancel(ctx, "alice", task.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTask(ctx, "alice", task.ID); err != nil {
		t.Fatalf("deleting a task with usage: %v", err)
	}
	if _, _, err := s.TaskModelUsage(ctx, "alice", task.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("usage of a deleted task: %v, want ErrNotFound", err)
	}
}
