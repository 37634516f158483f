package storetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/store"
)

func limits() store.Budgets {
	return store.Budgets{Steps: store.Budget{Limit: 20}, WallMillis: store.Budget{Limit: 60_000}}
}

// TestFillThenRecover proves the rows Fill writes are rows the store reads:
// recovery finds exactly the live tasks, and the completed ones list.
func TestFillThenRecover(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "taskhost.db")
	if err := FillSQLite(ctx, path, Fill{Principal: "p", Tasks: 200, Live: 5, Limits: limits()}); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Recover(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Interrupted) != 5 || rec.AttemptsClosed != 5 {
		t.Fatalf("recovered %d tasks and %d attempts, want 5 and 5", len(rec.Interrupted), rec.AttemptsClosed)
	}
	n, err := st.CountTasks(ctx, "p", store.ListQuery{Status: []store.Status{store.StatusCompleted}})
	if err != nil || n != 195 {
		t.Fatalf("completed tasks: %d, %v; want 195", n, err)
	}
	task, err := st.GetTask(ctx, "p", "t_fill00000000")
	if err != nil {
		t.Fatal(err)
	}
	if task.Budgets.Steps.Limit != 20 || task.Budgets.WallMillis.Limit != 60_000 {
		t.Errorf("budgets %+v, want the fill's limits", task.Budgets)
	}
}

func TestFillRefusesBadInput(t *testing.T) {
	tests := []struct {
		name string
		f    Fill
		ok   bool
	}{
		{"no principal", Fill{Tasks: 1}, false},
		{"negative tasks", Fill{Principal: "p", Tasks: -1}, false},
		{"tasks past the limit", Fill{Principal: "p", Tasks: MaxFill + 1}, false},
		{"negative live", Fill{Principal: "p", Tasks: 1, Live: -1}, false},
		{"live past tasks", Fill{Principal: "p", Tasks: 1, Live: 2}, false},
		{"empty fill", Fill{Principal: "p"}, true},
		{"all live", Fill{Principal: "p", Tasks: 3, Live: 3}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "taskhost.db")
			err := FillSQLite(context.Background(), path, tt.f)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused fill touched the file: stat: %v", err)
			}
		})
	}
}
