package api

import (
	"context"
	"fmt"

	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

type approvalService struct {
	apipb.UnimplementedApprovalServiceServer
	s *Server
}

func (as *approvalService) ListApprovals(ctx context.Context, req *apipb.ListApprovalsRequest) (*apipb.ListApprovalsResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	var st store.ApprovalStatus
	if req.Status != "" {
		var ok bool
		if st, ok = approvalStatuses[req.Status]; !ok {
			return nil, invalid("status", fmt.Sprintf("%q is not an approval status: use pending, approved, rejected, expired or cancelled", text.Clip(req.Status, 40)))
		}
	}
	list, err := as.s.opts.Tasks.Approvals(ctx, p, st)
	if err != nil {
		return nil, as.s.toStatus(ctx, err, "approval", "")
	}
	resp := &apipb.ListApprovalsResponse{}
	if len(list) > maxApprovals {
		list, resp.Truncated = list[:maxApprovals], true
	}
	for _, a := range list {
		resp.Approvals = append(resp.Approvals, approvalPB(a))
	}
	return resp, nil
}

func (as *approvalService) Approve(ctx context.Context, req *apipb.ResolveApprovalRequest) (*apipb.ResolveApprovalResponse, error) {
	if req.Pattern != "" && !req.ForTask {
		return nil, invalid("pattern", "is only for an approval for the rest of the task (for_task)")
	}
	if req.ForTask {
		if req.ValueJson != "" {
			return nil, invalid("value_json", "an answer to a question cannot be given for the rest of the task")
		}
		grant := func(ctx context.Context, principal, id string) (store.Approval, error) {
			return as.s.opts.Tasks.ApproveForTask(ctx, principal, id, req.Pattern)
		}
		return as.resolve(ctx, req, grant, "approved for the task")
	}
	if req.ValueJson != "" {
		// The runner checks the value's size and syntax, then, on the
		// caller's own approval only, that it is a question.
		answer := func(ctx context.Context, principal, id string) (store.Approval, error) {
			return as.s.opts.Tasks.Answer(ctx, principal, id, []byte(req.ValueJson))
		}
		return as.resolve(ctx, req, answer, "answered")
	}
	return as.resolve(ctx, req, as.s.opts.Tasks.Approve, "approved")
}

func (as *approvalService) Reject(ctx context.Context, req *apipb.ResolveApprovalRequest) (*apipb.ResolveApprovalResponse, error) {
	if req.ValueJson != "" {
		return nil, invalid("value_json", "a rejection takes no value")
	}
	return as.resolve(ctx, req, as.s.opts.Tasks.Reject, "rejected")
}

func (as *approvalService) resolve(ctx context.Context, req *apipb.ResolveApprovalRequest,
	fn func(ctx context.Context, principal, id string) (store.Approval, error), verb string) (*apipb.ResolveApprovalResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("approval_id", req.ApprovalId); err != nil {
		return nil, err
	}
	a, err := fn(ctx, p, req.ApprovalId)
	if err != nil {
		return nil, as.s.toStatus(ctx, err, "approval", req.ApprovalId)
	}
	as.s.log.Info("approval "+verb, "principal", p, "approval", a.ID, "task", a.TaskID)
	return &apipb.ResolveApprovalResponse{Approval: approvalPB(a)}, nil
}
