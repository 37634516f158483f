package api

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// fakeAdmin records the admin acts the API asks for, over the fake's tasks.
type fakeAdmin struct {
	f    *fakeTasks
	mu   sync.Mutex
	acts []string
}

func (a *fakeAdmin) TaskOwner(_ context.Context, id string) (string, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	t, ok := a.f.tasks[id]
	if !ok {
		return "", fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	return t.PrincipalID, nil
}

func (a *fakeAdmin) AdminAct(ctx context.Context, admin, id, act string) (string, error) {
	owner, err := a.TaskOwner(ctx, id)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acts = append(a.acts, fmt.Sprintf("%s %s by %s (owner %s)", act, id, admin, owner))
	return owner, nil
}

func TestAdminActsOnAnyTask(t *testing.T) {
	var admin *fakeAdmin
	ts := startServer(t, func(o *Options) {
		admin = &fakeAdmin{f: o.Tasks.(*fakeTasks)}
		o.Admins, o.AdminActs = []string{self}, admin
	})
	ts.fake.add(self, "t_admins", store.StatusInterrupted)
	ts.fake.add(tokenUser, "t_theirs", store.StatusInterrupted)
	asAdmin := apipb.NewTaskServiceClient(ts.unixConn(t))
	asUser := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))

	// The admin resumes, cancels and reads another principal's task; each
	// act is recorded with the admin's name.
	if resp, err := asAdmin.ResumeTask(ctxT(t), &apipb.ResumeTaskRequest{TaskId: "t_theirs"}); err != nil || resp.Task.Principal != tokenUser {
		t.Fatalf("admin resume: %v, %v", resp, err)
	}
	if _, err := asAdmin.CancelTask(ctxT(t), &apipb.CancelTaskRequest{TaskId: "t_theirs"}); err != nil {
		t.Fatalf("admin cancel: %v", err)
	}
	if _, err := asAdmin.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_theirs"}); err != nil {
		t.Fatalf("admin get: %v", err)
	}
	want := []string{"resume t_theirs by me (owner ci)", "cancel t_theirs by me (owner ci)"}
	if fmt.Sprint(admin.acts) != fmt.Sprint(want) {
		t.Fatalf("recorded acts %q, want %q", admin.acts, want)
	}
	_, err := asAdmin.ResumeTask(ctxT(t), &apipb.ResumeTaskRequest{TaskId: "t_zzzz"})
	wantCode(t, err, codes.NotFound, ReasonNotFound)

	list, err := asAdmin.ListTasks(ctxT(t), &apipb.ListTasksRequest{All: true})
	if err != nil || len(list.Tasks) != 2 {
		t.Fatalf("admin list --all: %v, %v; want both tasks", list, err)
	}
	if list, err := asAdmin.ListTasks(ctxT(t), &apipb.ListTasksRequest{}); err != nil || len(list.Tasks) != 1 || list.Tasks[0].Id != "t_admins" {
		t.Fatalf("admin list without all: %v, %v; want its own task only", list, err)
	}

	// A non-admin is unchanged: the admin's task is not found, and
	// listing everyone's is refused.
	admin.acts = nil
	for name, call := range map[string]func() error{
		"resume": func() error {
			_, err := asUser.ResumeTask(ctxT(t), &apipb.ResumeTaskRequest{TaskId: "t_admins"})
			return err
		},
		"cancel": func() error {
			_, err := asUser.CancelTask(ctxT(t), &apipb.CancelTaskRequest{TaskId: "t_admins"})
			return err
		},
		"get": func() error {
			_, err := asUser.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_admins"})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) { wantCode(t, call(), codes.NotFound, ReasonNotFound) })
	}
	_, err = asUser.ListTasks(ctxT(t), &apipb.ListTasksRequest{All: true})
	wantCode(t, err, codes.PermissionDenied, ReasonNotAdmin)
	if len(admin.acts) != 0 {
		t.Fatalf("a non-admin's calls recorded admin acts: %q", admin.acts)
	}
}
