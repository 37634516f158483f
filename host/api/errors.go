package api

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/store"
)

// ErrorDomain is the domain of every google.rpc.ErrorInfo the API returns.
const ErrorDomain = "taskhost.dev"

// Reasons in google.rpc.ErrorInfo: stable, for scripts.
const (
	ReasonInvalidArgument     = "INVALID_ARGUMENT"
	ReasonNotFound            = "NOT_FOUND"
	ReasonTaskConflict        = "TASK_CONFLICT"
	ReasonApprovalResolved    = "APPROVAL_RESOLVED"
	ReasonExecutorUnavailable = "EXECUTOR_UNAVAILABLE"
	ReasonBusy                = "BUSY"
	ReasonQueueFull           = "QUEUE_FULL"
	// ReasonParentDown: a child task's resume while its parent is
	// interrupted or has ended.
	ReasonParentDown    = "PARENT_DOWN"
	ReasonTasksDisabled = "TASKS_DISABLED"
	ReasonWatchLimit    = "WATCH_LIMIT"
	ReasonUnknownPeer   = "UNKNOWN_PEER"
	ReasonBadToken      = "BAD_TOKEN"
	ReasonThrottled     = "THROTTLED"
	ReasonRunningQuota  = "RUNNING_QUOTA"
	ReasonInternal      = "INTERNAL"
	ReasonShuttingDown  = "SHUTTING_DOWN"
)

// statusError is a status with an ErrorInfo naming reason.
func statusError(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// invalid is an InvalidArgument naming field.
func invalid(field, msg string) error {
	st := status.New(codes.InvalidArgument, field+": "+msg)
	if d, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonInvalidArgument, Domain: ErrorDomain, Metadata: map[string]string{"field": field}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg}}},
	); err == nil {
		st = d
	}
	return st.Err()
}

// notFound is the one answer for a missing task or approval and for one of
// another principal: it carries only what the caller sent.
func notFound(what, id string) error {
	return statusError(codes.NotFound, ReasonNotFound, what+" "+id+" not found")
}

// ReasonWorkspaceUntrusted: the task's workspace is one the host will not
// use (a symlink, another uid's, writable by group or others); the message
// says how to fix it. Only that task is affected.
const ReasonWorkspaceUntrusted = "WORKSPACE_UNTRUSTED"

// ReasonStoreUnavailable: the daemon's store refused a write (a full disk,
// an I/O error); the message names the cause. Retry once it is fixed.
const ReasonStoreUnavailable = "STORE_UNAVAILABLE"

// ReasonUnimplemented: this daemon does not serve the call (Unimplemented),
// e.g. ListHosts of a server built without a fleet view.
const ReasonUnimplemented = "UNIMPLEMENTED"

// toStatus maps an error of the Runner or store to a gRPC status. what and id
// name the object the call was about, for NotFound. Unexpected errors are
// logged and reported without detail.
func (s *Server) toStatus(ctx context.Context, err error, what, id string) error {
	var (
		fe  *plugin.FieldError
		te  *store.TransitionError
		ae  *store.ApprovalResolvedError
		ue  *plugin.UnavailableError
		be  *host.BusyError
		le  *store.LimitError
		sst interface{ GRPCStatus() *status.Status }
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &sst):
		return err // already a status
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.FromContextError(err).Err()
	case errors.As(err, &fe):
		return invalid(fe.Field, fe.Message)
	case errors.Is(err, store.ErrNotFound):
		return notFound(what, id)
	case errors.As(err, &ae):
		return statusError(codes.FailedPrecondition, ReasonApprovalResolved, ae.Error())
	case errors.Is(err, store.ErrParentDown):
		return statusError(codes.FailedPrecondition, ReasonParentDown, err.Error())
	case errors.As(err, &te):
		msg := te.Error()
		switch {
		case te.To == store.StatusRunning && te.Current.Terminal():
			msg += ": a finished task cannot be resumed; create a new one"
		case te.To == store.StatusRunning:
			msg += ": only an interrupted task can be resumed"
		}
		return statusError(codes.FailedPrecondition, ReasonTaskConflict, msg)
	case errors.Is(err, store.ErrConflict):
		return statusError(codes.FailedPrecondition, ReasonTaskConflict, err.Error())
	case errors.Is(err, tools.ErrUntrustedWorkspace):
		return statusError(codes.FailedPrecondition, ReasonWorkspaceUntrusted, err.Error())
	case errors.As(err, &ue), errors.Is(err, plugin.ErrExecutorUnavailable):
		return statusError(codes.FailedPrecondition, ReasonExecutorUnavailable, err.Error())
	case errors.Is(err, store.ErrQueueFull):
		return statusError(codes.ResourceExhausted, ReasonQueueFull, err.Error())
	case errors.As(err, &be), errors.Is(err, host.ErrBusy):
		return statusError(codes.ResourceExhausted, ReasonBusy, err.Error())
	case errors.Is(err, host.ErrDisabled):
		return statusError(codes.FailedPrecondition, ReasonTasksDisabled, err.Error())
	case errors.Is(err, host.ErrShuttingDown):
		return errClosing()
	case errors.Is(err, store.ErrUnavailable):
		s.log.Error("request refused: the store is unavailable", "object", what, "id", id, "error", err)
		return statusError(codes.Unavailable, ReasonStoreUnavailable, err.Error())
	case errors.As(err, &le):
		return invalid(le.Field, le.Error())
	case errors.Is(err, store.ErrInvalid):
		return statusError(codes.InvalidArgument, ReasonInvalidArgument, err.Error())
	}
	s.log.Error("api call failed", "object", what, "id", id, "error", err)
	return statusError(codes.Internal, ReasonInternal, "internal error in the taskhost daemon; its log has the details")
}
