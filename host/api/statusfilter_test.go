package api

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// The status filter takes every status once, blocked included (a parent
// waiting for its children), and one entry more is refused naming the
// bound; before, blocked was no status the filter knew and eight entries
// were past its bound of seven.
func TestListStatusFilterTakesEveryStatus(t *testing.T) {
	ts := startServer(t)
	ts.fake.add(self, "t_parent", store.StatusBlocked)
	ts.fake.add(self, "t_done", store.StatusCompleted)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))

	every := []string{"pending", "running", "waiting_approval", "blocked", "completed", "failed", "cancelled", "interrupted"}
	if len(every) != len(taskStatuses) {
		t.Fatalf("the test lists %d statuses, the API knows %d", len(every), len(taskStatuses))
	}
	resp, err := tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{Status: every})
	if err != nil || len(resp.Tasks) != 2 {
		t.Fatalf("every status: %v, %d tasks", err, len(resp.GetTasks()))
	}
	resp, err = tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{Status: []string{"blocked"}})
	if err != nil || len(resp.Tasks) != 1 || resp.Tasks[0].Id != "t_parent" {
		t.Fatalf("blocked: %v, %v", err, resp.GetTasks())
	}
	_, err = tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{Status: append(slices.Clone(every), "running")})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "status: has 9 entries, at most 8" {
		t.Fatalf("nine entries: %v", err)
	}
}
