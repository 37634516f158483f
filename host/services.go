package host

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/tools"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// turn is the identity of one step attempt in flight, named by its token.
type turn struct {
	taskID, principal string
	runID, attempt    int64
}

// turns maps live turn tokens to their step. A token is valid from the moment
// its step is sent until the step's outcome is known, and never again.
type turns struct {
	mu sync.Mutex
	m  map[string]*turnState
}

func newTurns() *turns { return &turns{m: map[string]*turnState{}} }

func (t *turns) issue(tr turn) (string, *turnState) {
	tok := randomToken()
	ctx, cancel := context.WithCancel(context.Background())
	ts := &turnState{turn: tr, ctx: ctx, cancel: cancel}
	t.mu.Lock()
	t.m[tok] = ts
	t.mu.Unlock()
	return tok, ts
}

func (t *turns) revoke(tok string) {
	t.mu.Lock()
	delete(t.m, tok)
	t.mu.Unlock()
}

func (t *turns) lookup(tok string) (*turnState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.m[tok]
	return ts, ok
}

// randomToken is 192 random bits, URL-safe.
func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// taskServices is the ServicesServer endpoint of one plugin process, bound to the
// one task that process serves.
type taskServices struct {
	pb.UnimplementedHostServicesServer
	r      *Runner
	taskID string
}

// authorizeState resolves a turn token for this endpoint's task. A token of
// a finished step or of another task is refused the same way, and logged.
func (s *taskServices) authorizeState(method, tok string) (*turnState, error) {
	ts, ok := s.r.turns.lookup(tok)
	if !ok || ts.taskID != s.taskID {
		s.r.log.Warn("host service call with an invalid turn token refused", "method", method, "task", s.taskID)
		return nil, refuse(ErrNotAllowed, "turn token is not valid for a step of this task in flight")
	}
	return ts, nil
}

// Progress records a bounded note as a step.progress event.
func (s *taskServices) Progress(ctx context.Context, req *pb.ProgressRequest) (*pb.ProgressResponse, error) {
	ts, err := s.authorizeState("Progress", req.GetTurnToken())
	if err != nil {
		return nil, serviceStatus(err)
	}
	if err := s.r.progress(ctx, ts.turn, req.GetNote()); err != nil {
		return nil, serviceStatus(fmt.Errorf("progress %w: %w", ErrNotRecorded, err))
	}
	return &pb.ProgressResponse{}, nil
}

// ListTools lists the enabled tools, for the executor to offer a model.
func (s *taskServices) ListTools(_ context.Context, req *pb.ListToolsRequest) (*pb.ListToolsResponse, error) {
	if _, err := s.authorizeState("ListTools", req.GetTurnToken()); err != nil {
		return nil, serviceStatus(err)
	}
	out := &pb.ListToolsResponse{}
	if s.r.svc.Tools == nil {
		return out, nil
	}
	for _, t := range s.r.svc.Tools.Specs() {
		out.Tools = append(out.Tools, &pb.ToolSpec{Name: t.Name, Description: t.Description, ParametersJson: t.Parameters})
	}
	return out, nil
}

// The ErrorInfo of host-service refusals the code alone does not tell
// apart; the SDK reads them (sdk.ReasonEffectUnsettled and co.).
const (
	errorDomain               = "taskhost.dev"
	sdkReasonEffectUnsettled  = "EFFECT_UNSETTLED"
	sdkReasonModelUnavailable = "MODEL_UNAVAILABLE"
	sdkReasonModelFailed      = "MODEL_FAILED"
)

// serviceStatus is the one mapping of a host service's Go error to the gRPC
// status the executor receives (the SDK branches on the code and the
// ErrorInfo reason): a model outage is Unavailable with MODEL_UNAVAILABLE,
// which an executor may retry and which is distinct from a host that is
// gone; a model failure for good is Aborted with MODEL_FAILED; both carry
// the SDK's error kind. An unsettled effect is FailedPrecondition with
// EFFECT_UNSETTLED naming the earlier entry. An error of no known kind is
// Internal.
func serviceStatus(err error) error {
	var (
		fe *FieldError
		ue *UnsettledEffectError
		me *ModelError
		ae *tools.ArgError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		e := ue.Effect
		return withInfo(codes.FailedPrecondition, err.Error(), sdkReasonEffectUnsettled, map[string]string{
			"kind": string(e.Kind), "attempt": strconv.FormatInt(e.Attempt, 10), "seq": strconv.FormatInt(e.Seq, 10), "status": string(e.Status)})
	case errors.As(err, &me):
		code, reason := codes.Aborted, sdkReasonModelFailed
		if me.Unavailable {
			code, reason = codes.Unavailable, sdkReasonModelUnavailable
		}
		return withInfo(code, me.Message, reason, map[string]string{"kind": me.Kind})
	case errors.Is(err, ErrBudgetExhausted):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, ErrNotAllowed):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrNotConfigured):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, ErrUnknownTool):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrStepEnded), errors.Is(err, ErrEffectUnsettled):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrToolFailed), errors.Is(err, ErrApprovalRefused):
		return status.Error(codes.Aborted, err.Error())
	case errors.As(err, &fe), errors.As(err, &ae):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, ErrNotRecorded), errors.Is(err, store.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// withInfo is a status with an ErrorInfo of reason in the host's domain.
func withInfo(code codes.Code, msg, reason string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain, Metadata: meta}); err == nil {
		st = d
	}
	return st.Err()
}
