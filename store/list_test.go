package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestListOrderAndPaging lists in creation order — by Seq, not by time: the
// clock here runs backwards — and pages through with AfterSeq.
func TestListOrderAndPaging(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// Every order pages through the same tasks once each, its cursor holding
// even when a listed task changes status between pages; the filters and
// CountTasks agree.
func TestListOrdersFiltersAndCount(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Minute)
		return clock
	}
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t, func(o *Options) { o.Now = tick })
		ctx := context.Background()
		var created []string
		for i := range 12 {
			id := fmt.Sprintf("t%02d", i)
			exec := "legacy"
			if i%3 == 0 {
				exec = "machinespirit"
			}
			if _, err := s.CreateTask(ctx, NewTask{ID: id, PrincipalID: "p", Executor: exec, Spec: []byte(`{}`), Limits: defaultBudgets()}); err != nil {
				t.Fatal(err)
			}
			createTask(t, s, "q", "q"+id) // another principal's, never listed
			created = append(created, id)
		}
		for _, id := range []string{"t01", "t05", "t10"} {
			if _, err := s.Cancel(ctx, "p", id); err != nil {
				t.Fatal(err)
			}
		}
		newest := slices.Clone(created)
		slices.Reverse(newest)
		byStatus := []string{"t10", "t05", "t01"} // cancelled, newest first
		for _, id := range newest {
			if !slices.Contains(byStatus, id) {
				byStatus = append(byStatus, id) // then pending
			}
		}
		t06, err := s.GetTask(ctx, "p", "t06")
		if err != nil {
			t.Fatal(err)
		}
		since := t06.CreatedAt
		cases := []struct {
			name string
			q    ListQuery
			want []string
		}{
			{"created", ListQuery{Order: OrderCreated}, created},
			{"newest", ListQuery{Order: OrderNewest}, newest},
			{"status", ListQuery{Order: OrderStatus}, byStatus},
			{"executor", ListQuery{Order: OrderNewest, Executor: "machinespirit"}, []string{"t09", "t06", "t03", "t00"}},
			{"since", ListQuery{Order: OrderNewest, Since: since}, []string{"t11", "t10", "t09", "t08", "t07", "t06"}},
			{"all filters", ListQuery{Order: OrderStatus, Since: since, Executor: "legacy", Status: []Status{StatusCancelled, StatusPending}},
				[]string{"t10", "t11", "t08", "t07"}},
			{"no match", ListQuery{Executor: "nope"}, nil},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				for _, size := range []int{1, 5, 100} {
					var got []string
					q := tc.q
					q.Limit = size
					for {
						page, err := s.ListTasks(ctx, "p", q)
						if err != nil {
							t.Fatal(err)
						}
						if len(page) == 0 {
							break
						}
						got = append(got, ids(page)...)
						last := page[len(page)-1]
						q.AfterSeq, q.AfterStatus = last.Seq, last.Status
					}
					if !slices.Equal(got, tc.want) {
						t.Fatalf("page size %d: %v, want %v", size, got, tc.want)
					}
				}
				n, err := s.CountTasks(ctx, "p", tc.q)
				if err != nil || n != int64(len(tc.want)) {
					t.Fatalf("CountTasks = %d, %v; want %d", n, err, len(tc.want))
				}
			})
		}

		// Bad input names the field and the limit.
		long := strings.Repeat("x", MaxExecutorBytes)
		if _, err := s.ListTasks(ctx, "p", ListQuery{Executor: long}); err != nil {
			t.Fatalf("an executor of %d bytes: %v", MaxExecutorBytes, err)
		}
		for _, q := range []ListQuery{{Executor: long + "x"}, {Order: ListOrder(9)}} {
			if _, err := s.ListTasks(ctx, "p", q); !errors.Is(err, ErrInvalid) {
				t.Errorf("ListTasks(%+v) = %v, want ErrInvalid", q, err)
			}
		}
		if _, err := s.CountTasks(ctx, "p", ListQuery{Executor: long + "x"}); err == nil || !strings.Contains(err.Error(), "executor is 65 bytes, at most 64") {
			t.Errorf("CountTasks with a long executor: %v", err)
		}
	})
}

// BenchmarkListPage measures one ListTasks page of 100 (oldest first, the
// baseline, and newest first) and the CountTasks every API page adds, over
// one principal's 20000 tasks.
func BenchmarkListPage(b *testing.B) {
	s := openTest(b)
	ctx := context.Background()
	for i := range 20000 {
		if _, err := s.CreateTask(ctx, NewTask{ID: fmt.Sprintf("t%05d", i), PrincipalID: "p", Executor: "legacy", Spec: []byte(`{}`), Limits: defaultBudgets()}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		run  func() error
	}{
		{"created", func() error { _, err := s.ListTasks(ctx, "p", ListQuery{Limit: 100}); return err }},
		{"newest", func() error { _, err := s.ListTasks(ctx, "p", ListQuery{Order: OrderNewest, Limit: 100}); return err }},
		{"status", func() error { _, err := s.ListTasks(ctx, "p", ListQuery{Order: OrderStatus, Limit: 100}); return err }},
		{"count", func() error { _, err := s.CountTasks(ctx, "p", ListQuery{}); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestListAllPrincipals: an admin's listing and count span every
// principal, with the filters still applied, on both engines (the
// principal-free WHERE must be one PostgreSQL takes: it refuses "WHERE 1").
func TestListAllPrincipals(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		createTask(t, s, "alice", "a1")
		createTask(t, s, "bob", "b1")
		runningTask(t, s, "bob", "b2")
		q := ListQuery{AllPrincipals: true, Status: []Status{StatusPending}}
		ts, err := s.ListTasks(ctx, "admin", q)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, task := range ts {
			ids = append(ids, task.ID)
		}
		if strings.Join(ids, ",") != "a1,b1" {
			t.Fatalf("listed %v, want a1,b1", ids)
		}
		if n, err := s.CountTasks(ctx, "admin", q); err != nil || n != 2 {
			t.Fatalf("CountTasks = %d, %v; want 2", n, err)
		}
	})
}
