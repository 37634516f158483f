package plugin

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/tools"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// servicesServer is the gRPC HostServices server of one plugin process: it
// converts between the wire and the Services a Launcher was given, and maps
// every refusal to a status once (serviceStatus). It is the only place the
// host services meet a generated type.
type servicesServer struct {
	pb.UnimplementedHostServicesServer
	svc Services
}

// NewServicesServer is the HostServices server a launched plugin process
// is served svc through. A test of the Services behind it calls it the way
// a plugin would, over the same methods and codes.
func NewServicesServer(svc Services) pb.HostServicesServer { return &servicesServer{svc: svc} }

func (s *servicesServer) Progress(ctx context.Context, req *pb.ProgressRequest) (*pb.ProgressResponse, error) {
	if err := s.svc.Progress(ctx, req.GetTurnToken(), req.GetNote()); err != nil {
		return nil, serviceStatus(err)
	}
	return &pb.ProgressResponse{}, nil
}

func (s *servicesServer) ListTools(ctx context.Context, req *pb.ListToolsRequest) (*pb.ListToolsResponse, error) {
	specs, err := s.svc.ListTools(ctx, req.GetTurnToken())
	if err != nil {
		return nil, serviceStatus(err)
	}
	out := &pb.ListToolsResponse{}
	for _, t := range specs {
		out.Tools = append(out.Tools, &pb.ToolSpec{Name: t.Name, Description: t.Description, ParametersJson: t.Parameters})
	}
	return out, nil
}

func (s *servicesServer) CallModel(ctx context.Context, req *pb.CallModelRequest) (*pb.CallModelResponse, error) {
	call := ModelCall{TurnToken: req.GetTurnToken(), ParentCallToken: req.GetParentCallToken()}
	for _, m := range req.GetMessages() {
		msg := model.Message{Role: m.GetRole(), Content: m.GetContent(), ToolCallID: m.GetToolCallId()}
		for _, tc := range m.GetToolCalls() {
			msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: tc.GetId(), Name: tc.GetName(), Arguments: tc.GetArgumentsJson()})
		}
		call.Messages = append(call.Messages, msg)
	}
	for _, t := range req.GetTools() {
		call.Tools = append(call.Tools, model.ToolSpec{Name: t.GetName(), Description: t.GetDescription(), Parameters: t.GetParametersJson()})
	}
	ans, err := s.svc.CallModel(ctx, call)
	if err != nil {
		return nil, serviceStatus(err)
	}
	m := ans.Message
	out := &pb.ChatMessage{Role: m.Role, Content: m.Content, ToolCallId: m.ToolCallID}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, &pb.ToolCall{Id: tc.ID, Name: tc.Name, ArgumentsJson: tc.Arguments})
	}
	return &pb.CallModelResponse{Message: out, CallToken: ans.CallToken, Depth: uint32(ans.Depth), Replayed: ans.Replayed,
		FinishReason: ans.FinishReason, PromptTokens: ans.Usage.PromptTokens, CompletionTokens: ans.Usage.CompletionTokens,
		DurationMs: ans.Usage.Duration.Milliseconds()}, nil
}

func (s *servicesServer) CallTool(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	ans, err := s.svc.CallTool(ctx, ToolCall{TurnToken: req.GetTurnToken(), Name: req.GetName(), Arguments: []byte(req.GetArgumentsJson()),
		IdempotencyKey: req.GetIdempotencyKey(), Idempotent: req.GetIdempotent()})
	if err != nil {
		return nil, serviceStatus(err)
	}
	return &pb.CallToolResponse{ResultJson: ans.Output, IsError: ans.IsError, Replayed: ans.Replayed}, nil
}

func (s *servicesServer) RequestApproval(ctx context.Context, req *pb.RequestApprovalRequest) (*pb.RequestApprovalResponse, error) {
	if err := s.svc.RequestApproval(ctx, req.GetTurnToken(), req.GetPrompt()); err != nil {
		return nil, serviceStatus(err)
	}
	return &pb.RequestApprovalResponse{Decision: "approved"}, nil
}

func (s *servicesServer) RequestInput(ctx context.Context, req *pb.RequestInputRequest) (*pb.RequestInputResponse, error) {
	v, err := s.svc.RequestInput(ctx, req.GetTurnToken(), req.GetQuestion())
	if err != nil {
		return nil, serviceStatus(err)
	}
	return &pb.RequestInputResponse{ValueJson: string(v)}, nil
}

func (s *servicesServer) AbandonEffect(ctx context.Context, req *pb.AbandonEffectRequest) (*pb.AbandonEffectResponse, error) {
	if err := s.svc.AbandonEffect(ctx, req.GetTurnToken(), int64(req.GetAttempt()), int64(req.GetSeq())); err != nil {
		return nil, serviceStatus(err)
	}
	return &pb.AbandonEffectResponse{}, nil
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
			"kind": e.Kind, "attempt": strconv.FormatInt(e.Attempt, 10), "seq": strconv.FormatInt(e.Seq, 10), "status": e.Status})
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
	case errors.Is(err, ErrNotRecorded):
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
