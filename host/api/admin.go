package api

import (
	"context"

	"google.golang.org/grpc/codes"
)

// ReasonNotAdmin: the call needs an admin principal ([api] admins).
const ReasonNotAdmin = "NOT_ADMIN"

// AdminActs is what the API needs to let an admin act on any principal's
// task; *host.Runner implements it.
type AdminActs interface {
	// AdminAct records admin's act on task id in the task's events (unless
	// admin owns it) and returns the task's owner; on an error the act
	// must not happen.
	AdminAct(ctx context.Context, admin, id, act string) (owner string, err error)
	// TaskOwner returns the principal of task id.
	TaskOwner(ctx context.Context, id string) (string, error)
}

func (s *Server) isAdmin(principal string) bool {
	return s.opts.AdminActs != nil && s.admins[principal]
}

// owner returns the principal whose task id the caller p acts on: p
// itself, or, for an admin, the task's owner (after recording act, when
// act is not ""). For anyone else another principal's task stays
// NotFound, since the lookups below are made with p.
func (s *Server) owner(ctx context.Context, p, id, act string) (string, error) {
	if !s.isAdmin(p) {
		return p, nil
	}
	var owner string
	var err error
	if act == "" {
		owner, err = s.opts.AdminActs.TaskOwner(ctx, id)
	} else {
		owner, err = s.opts.AdminActs.AdminAct(ctx, p, id, act)
	}
	if err != nil {
		return "", s.toStatus(ctx, err, "task", id)
	}
	if owner != p {
		s.log.Info("admin acting on another principal's task", "admin", p, "owner", owner, "task", id, "act", act)
	}
	return owner, nil
}

func errNotAdmin() error {
	return statusError(codes.PermissionDenied, ReasonNotAdmin, "only an admin principal ([api] admins in the daemon's config) may list every principal's tasks")
}
