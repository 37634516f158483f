package api

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// Control is what the API needs for pause and bulk control and the
// queue's view; *host.Runner implements it. A Tasks that does not is
// answered Unimplemented for PauseTask and ControlTasks, and shows no
// queue positions.
type Control interface {
	Pause(ctx context.Context, principal, id string) (store.Task, error)
	Bulk(ctx context.Context, caller string, allPrincipals bool, act string,
		resume func(ctx context.Context, owner, id string) (store.Task, error)) (host.BulkResult, error)
	QueuePositions(ctx context.Context) (map[string]int64, error)
}

func (s *Server) control() (Control, error) {
	c, ok := s.opts.Tasks.(Control)
	if !ok {
		return nil, statusError(codes.Unimplemented, ReasonUnimplemented, "this daemon has no pause or bulk control")
	}
	return c, nil
}

func (ts *taskService) PauseTask(ctx context.Context, req *apipb.PauseTaskRequest) (*apipb.PauseTaskResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("task_id", req.TaskId); err != nil {
		return nil, err
	}
	c, err := ts.s.control()
	if err != nil {
		return nil, err
	}
	caller := p
	if p, err = ts.s.owner(ctx, p, req.TaskId, host.AdminPause); err != nil {
		return nil, err
	}
	t, err := c.Pause(ctx, p, req.TaskId)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
	}
	ts.s.log.Info("task paused", "principal", p, "by", caller, "task", t.ID)
	return &apipb.PauseTaskResponse{Task: taskPB(t, true)}, nil
}

func (ts *taskService) ControlTasks(ctx context.Context, req *apipb.ControlTasksRequest) (*apipb.ControlTasksResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	switch req.Action {
	case host.BulkCancel, host.BulkPause, host.BulkResume:
	default:
		return nil, invalid("action", fmt.Sprintf("%q is not an act: use cancel, pause or resume", text.Clip(req.Action, 40)))
	}
	if req.AllPrincipals && !ts.s.isAdmin(p) {
		return nil, statusError(codes.PermissionDenied, ReasonNotAdmin, "only an admin principal ([api] admins in the daemon's config) may act on every principal's tasks")
	}
	c, err := ts.s.control()
	if err != nil {
		return nil, err
	}
	// Each resume is one ResumeTask would make: within the owner's quota.
	resume := func(ctx context.Context, owner, id string) (store.Task, error) {
		var t store.Task
		err := ts.s.startWithin(ctx, owner, func() error {
			var err error
			t, err = ts.s.opts.Tasks.Resume(ctx, owner, id)
			return err
		})
		return t, err
	}
	res, err := c.Bulk(ctx, p, req.AllPrincipals, req.Action, resume)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", "")
	}
	resp := &apipb.ControlTasksResponse{More: res.More}
	for _, t := range res.Done {
		resp.Tasks = append(resp.Tasks, taskPB(t, false))
	}
	for _, f := range res.Failed {
		st, _ := status.FromError(ts.s.toStatus(ctx, f.Err, "task", f.Task.ID))
		resp.Failures = append(resp.Failures, &apipb.ControlFailure{
			TaskId: f.Task.ID, Principal: f.Task.PrincipalID, Reason: reasonOfStatus(st), Message: st.Message(), Code: int32(st.Code())})
	}
	ts.s.log.Info("tasks controlled", "by", p, "action", req.Action, "all_principals", req.AllPrincipals,
		"done", len(resp.Tasks), "failed", len(resp.Failures), "more", resp.More)
	return resp, nil
}

// withQueuePositions sets the queue position of each pending task of ts.
func (s *Server) withQueuePositions(ctx context.Context, ts ...*apipb.Task) error {
	c, ok := s.opts.Tasks.(Control)
	if !ok {
		return nil
	}
	pending := false
	for _, t := range ts {
		pending = pending || t.Status == string(store.StatusPending)
	}
	if !pending {
		return nil
	}
	pos, err := c.QueuePositions(ctx)
	if err != nil {
		return s.toStatus(ctx, err, "task", "")
	}
	for _, t := range ts {
		t.QueuePosition = pos[t.Id]
	}
	return nil
}

func reasonOfStatus(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(interface{ GetReason() string }); ok {
			return info.GetReason()
		}
	}
	return ""
}
