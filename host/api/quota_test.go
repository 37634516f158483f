package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

func limitOf(t *testing.T, err error) string {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Metadata["limit"]
		}
	}
	return ""
}

func (f *fakeTasks) count(principal string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.tasks {
		if t.PrincipalID == principal {
			n++
		}
	}
	return n
}

// TestRunningQuotaPerPrincipal: principal "me" at her quota of running
// tasks cannot take the slot of principal "ci", even racing herself; ci
// still creates. A refused create writes nothing.
func TestRunningQuotaPerPrincipal(t *testing.T) {
	const quota = 2
	ts := startServer(t, func(o *Options) { o.MaxRunningPerPrincipal = quota })
	ts.fake.add(self, "t_done", store.StatusCompleted) // a finished task takes no slot
	me := apipb.NewTaskServiceClient(ts.unixConn(t))
	spec := []byte(`{"goal":"g"}`)

	// Ten racing creates: exactly quota of them win.
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = me.CreateTask(ctxT(t), &apipb.CreateTaskRequest{Spec: spec})
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		st := wantCode(t, err, codes.ResourceExhausted, ReasonRunningQuota)
		if limitOf(t, err) != "tasks.max_running_per_principal" || !strings.Contains(st.Message(), "tasks.max_running_per_principal = 2") {
			t.Fatalf("refusal does not name the limit: %v", err)
		}
	}
	if ok != quota || ts.fake.count(self) != quota+1 {
		t.Fatalf("%d creates succeeded, %d tasks stored; want %d and %d", ok, ts.fake.count(self), quota, quota+1)
	}
	// An interrupted task of hers cannot be resumed past the quota either.
	ts.fake.add(self, "t_int", store.StatusInterrupted)
	_, err := me.ResumeTask(ctxT(t), &apipb.ResumeTaskRequest{TaskId: "t_int"})
	wantCode(t, err, codes.ResourceExhausted, ReasonRunningQuota)

	ci := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))
	if _, err := ci.CreateTask(ctxT(t), &apipb.CreateTaskRequest{Spec: spec}); err != nil {
		t.Fatalf("the other principal cannot create: %v", err)
	}
}

// TestWatchQuotaPerPrincipal: "me" at her watch quota is refused, naming
// the limit; "ci" still watches; a closed stream frees the slot.
func TestWatchQuotaPerPrincipal(t *testing.T) {
	const quota = 2
	ts := startServer(t, func(o *Options) { o.MaxWatchesPerPrincipal = quota })
	ts.fake.add(self, "t_me", store.StatusRunning)
	ts.fake.add(tokenUser, "t_ci", store.StatusRunning)
	me := apipb.NewTaskServiceClient(ts.unixConn(t))

	var cancels []func()
	open := func(tc apipb.TaskServiceClient, id string) error {
		ctx, cancel := context.WithCancel(ctxT(t))
		s, err := tc.WatchTask(ctx, &apipb.WatchTaskRequest{TaskId: id})
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil {
			cancel()
			return err
		}
		cancels = append(cancels, cancel)
		return nil
	}
	for i := range quota {
		if err := open(me, "t_me"); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	err := open(me, "t_me")
	wantCode(t, err, codes.ResourceExhausted, ReasonWatchLimit)
	if limitOf(t, err) != "api.max_watches_per_principal" {
		t.Fatalf("refusal does not name the limit: %v", err)
	}
	ci := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))
	if err := open(ci, "t_ci"); err != nil {
		t.Fatalf("the other principal cannot watch: %v", err)
	}
	cancels[0]()
	testwait.Until(t, 5*time.Second, "a closed watch did not free its slot", func() bool { return open(me, "t_me") == nil })
	for _, c := range cancels {
		c()
	}
}

// TestPageTokensAreOpaqueAndBound: a token shows no sequence number, works
// only for the principal it was issued to, and any change is refused with
// InvalidArgument naming page_token.
func TestPageTokensAreOpaqueAndBound(t *testing.T) {
	ts := startServer(t)
	for i := range 4 {
		ts.fake.add(self, fmt.Sprintf("t_me%d", i), store.StatusCompleted)
		ts.fake.add(tokenUser, fmt.Sprintf("t_ci%d", i), store.StatusCompleted)
	}
	me := apipb.NewTaskServiceClient(ts.unixConn(t))
	ci := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))
	resp, err := me.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageSize: 2})
	if err != nil || resp.NextPageToken == "" {
		t.Fatalf("first page: %v %v", resp, err)
	}
	tok := resp.NextPageToken
	// The last listed task has global seq 3; nothing of it shows.
	if strings.ContainsAny(tok, "+/=") || strings.Contains(tok, "3") && len(tok) < 20 {
		t.Fatalf("token %q looks like a cursor", tok)
	}
	again, _ := me.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageSize: 2})
	if again.NextPageToken == tok {
		t.Fatal("two tokens for the same position are equal: they are deterministic")
	}
	next, err := me.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageSize: 2, PageToken: tok})
	if err != nil || len(next.Tasks) != 2 || next.Tasks[0].Id != "t_me2" {
		t.Fatalf("second page: %v %v", next, err)
	}
	flipped := []byte(tok)
	flipped[len(flipped)/2] ^= 1
	for _, c := range []struct {
		name string
		tc   apipb.TaskServiceClient
		tok  string
	}{
		{"another principal's", ci, tok},
		{"tampered", me, string(flipped)},
		{"truncated", me, tok[:len(tok)-1]},
		{"a plain seq", me, "3"},
		{"too long", me, strings.Repeat("A", 10000)},
	} {
		_, err := c.tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageToken: c.tok})
		st := wantCode(t, err, codes.InvalidArgument, ReasonInvalidArgument)
		if !strings.HasPrefix(st.Message(), "page_token:") {
			t.Fatalf("%s token: %q does not name page_token", c.name, st.Message())
		}
	}
}
