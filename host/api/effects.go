package api

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// Effects is the unsettled-effect ledger as an operator sees it;
// *host.Runner implements it.
type Effects interface {
	// UnsettledEffects lists the task's effects that were unsettled,
	// resolved or not, newest first.
	UnsettledEffects(ctx context.Context, principal, id string) ([]store.Effect, error)
	// ResolveEffect resolves one for operator (principal, or an admin).
	ResolveEffect(ctx context.Context, principal, id string, attempt, seq int64, to store.EffectResolution, operator string) (store.Effect, error)
}

// AdminResolveEffect is the act an admin's ResolveEffect records on
// another principal's task.
const AdminResolveEffect = "resolve_effect"

func (ts *taskService) ResolveEffect(ctx context.Context, req *apipb.ResolveEffectRequest) (*apipb.ResolveEffectResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if ts.s.opts.Effects == nil {
		return nil, statusError(codes.Unimplemented, ReasonInternal, "this daemon does not resolve effects")
	}
	if err := checkID("task_id", req.TaskId); err != nil {
		return nil, err
	}
	switch {
	case req.Attempt < 1:
		return nil, invalid("attempt", fmt.Sprintf("must be positive, got %d", req.Attempt))
	case req.Seq < 1:
		return nil, invalid("seq", fmt.Sprintf("must be positive, got %d", req.Seq))
	}
	to := store.EffectResolution(req.Resolution)
	if to != store.ResolutionRetryAuthorized && to != store.ResolutionAbandoned {
		return nil, invalid("resolution", fmt.Sprintf("must be retry_authorized or abandoned, got %q", text.Truncate(req.Resolution, 64)))
	}
	caller := p
	if p, err = ts.s.owner(ctx, p, req.TaskId, AdminResolveEffect); err != nil {
		return nil, err
	}
	e, err := ts.s.opts.Effects.ResolveEffect(ctx, p, req.TaskId, req.Attempt, req.Seq, to, caller)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "effect", fmt.Sprintf("%d/%d of task %s", req.Attempt, req.Seq, req.TaskId))
	}
	ts.s.log.Info("effect resolved", "principal", p, "by", caller, "task", req.TaskId, "attempt", req.Attempt, "seq", req.Seq, "resolution", to)
	return &apipb.ResolveEffectResponse{Effect: unsettledPB(e)}, nil
}

// unsettledEffects is the task's unsettled-effect list for GetTask; nil
// when the daemon has no Effects.
func (ts *taskService) unsettledEffects(ctx context.Context, p, id string) ([]*apipb.UnsettledEffect, error) {
	if ts.s.opts.Effects == nil {
		return nil, nil
	}
	effs, err := ts.s.opts.Effects.UnsettledEffects(ctx, p, id)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", id)
	}
	out := make([]*apipb.UnsettledEffect, 0, len(effs))
	for _, e := range effs {
		out = append(out, unsettledPB(e))
	}
	return out, nil
}

func unsettledPB(e store.Effect) *apipb.UnsettledEffect {
	out := &apipb.UnsettledEffect{Attempt: e.Attempt, Seq: e.Seq, Status: string(e.Status), Summary: e.Summary,
		Resolution: string(e.Resolution), ResolvedBy: e.ResolvedBy}
	if !e.ResolvedAt.IsZero() {
		out.ResolvedUnixNano = e.ResolvedAt.UnixNano()
	}
	return out
}
