package store

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// TestListOrderAndPaging lists in creation order — by Seq, not by time: the
// clock here runs backwards — and pages through with AfterSeq.
func TestListOrderAndPaging(t *testing.T) {
	forDrivers(t, func(t *testing.T, open opener) {
		var mu sync.Mutex
		clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		backwards := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(-time.Second)
			return clock
		}
		s := open(t, func(o *Options) { o.Now = backwards })
		ctx := context.Background()

		var want []string
		for i := range 25 {
			id := fmt.Sprintf("t%02d", i)
			createTask(t, s, "p", id)
			createTask(t, s, "q", fmt.Sprintf("q%02d", i)) // interleaved: another principal's seqs in between
			want = append(want, id)
		}
		all, err := s.ListTasks(ctx, "p", ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(all); !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v, want %v", got, want)
		}
		for i := 1; i < len(all); i++ {
			if all[i].Seq <= all[i-1].Seq || !all[i].CreatedAt.Before(all[i-1].CreatedAt) {
				t.Fatalf("seq must grow even though the clock went back: %+v then %+v", all[i-1], all[i])
			}
		}

		for _, size := range []int{1, 7, 10, 25, 30} {
			t.Run(fmt.Sprintf("page=%d", size), func(t *testing.T) {
				var got []string
				var after int64
				for {
					page, err := s.ListTasks(ctx, "p", ListQuery{AfterSeq: after, Limit: size})
					if err != nil {
						t.Fatal(err)
					}
					if len(page) > size {
						t.Fatalf("page of %d, limit %d", len(page), size)
					}
					if len(page) == 0 {
						break
					}
					got = append(got, ids(page)...)
					after = page[len(page)-1].Seq
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("paged %v, want %v", got, want)
				}
			})
		}

		// Status filter, with repeats and the listing's checkpoint omission.
		task, a := claimedTask(t, s, "p", "run")
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "run", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", Checkpoint: []byte("ck")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Cancel(ctx, "p", "t03"); err != nil {
			t.Fatal(err)
		}
		got, err := s.ListTasks(ctx, "p", ListQuery{Status: []Status{StatusRunning, StatusCancelled, StatusRunning}})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ids(got), []string{"t03", "run"}) || got[1].Checkpoint != nil {
			t.Fatalf("filtered listing: %v", ids(got))
		}
		if _, err := s.ListTasks(ctx, "p", ListQuery{Status: []Status{"paused"}}); err == nil {
			t.Fatal("unknown status accepted")
		}
	})
}

func TestListLimits(t *testing.T) {
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		for i := range 1001 {
			if _, err := s.CreateTask(ctx, NewTask{ID: fmt.Sprintf("t%04d", i), PrincipalID: "p", Executor: "legacy",
				Spec: []byte(`{}`), Limits: defaultBudgets()}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tt := range []struct{ limit, want int }{{0, 100}, {-5, 100}, {1, 1}, {1000, 1000}, {5000, 1000}} {
			got, err := s.ListTasks(ctx, "p", ListQuery{Limit: tt.limit})
			if err != nil || len(got) != tt.want {
				t.Fatalf("Limit %d: %d tasks, %v; want %d", tt.limit, len(got), err, tt.want)
			}
		}
	})
}

func ids(ts []Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}
