package host

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
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
	m  map[string]turn
}

func newTurns() *turns { return &turns{m: map[string]turn{}} }

func (t *turns) issue(tr turn) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	tok := base64.RawURLEncoding.EncodeToString(b)
	t.mu.Lock()
	t.m[tok] = tr
	t.mu.Unlock()
	return tok
}

func (t *turns) revoke(tok string) {
	t.mu.Lock()
	delete(t.m, tok)
	t.mu.Unlock()
}

func (t *turns) lookup(tok string) (turn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.m[tok]
	return tr, ok
}

// services is the HostServices endpoint of one plugin process, bound to the
// one task that process serves.
type services struct {
	pb.UnimplementedHostServicesServer
	r      *Runner
	taskID string
}

// authorize resolves a turn token for this endpoint's task. A token of a
// finished step or of another task is refused the same way, and logged.
func (s *services) authorize(method, tok string) (turn, error) {
	tr, ok := s.r.turns.lookup(tok)
	if !ok || tr.taskID != s.taskID {
		s.r.log.Warn("host service call with an invalid turn token refused", "method", method, "task", s.taskID)
		return turn{}, status.Error(codes.PermissionDenied, "turn token is not valid for a step of this task in flight")
	}
	return tr, nil
}

func (s *services) CallModel(_ context.Context, req *pb.CallModelRequest) (*pb.CallModelResponse, error) {
	if _, err := s.authorize("CallModel", req.GetTurnToken()); err != nil {
		return nil, err
	}
	return nil, status.Error(codes.Unimplemented, "CallModel is not built yet: model providers arrive with the host-services work")
}

func (s *services) CallTool(_ context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	if _, err := s.authorize("CallTool", req.GetTurnToken()); err != nil {
		return nil, err
	}
	return nil, status.Error(codes.Unimplemented, "CallTool is not built yet: the tool registry arrives with the host-services work")
}

func (s *services) RequestApproval(_ context.Context, req *pb.RequestApprovalRequest) (*pb.RequestApprovalResponse, error) {
	if _, err := s.authorize("RequestApproval", req.GetTurnToken()); err != nil {
		return nil, err
	}
	return nil, status.Error(codes.Unimplemented, "RequestApproval is not built yet: approvals arrive with the host-services work")
}

// Progress records a bounded note as a step.progress event.
func (s *services) Progress(ctx context.Context, req *pb.ProgressRequest) (*pb.ProgressResponse, error) {
	tr, err := s.authorize("Progress", req.GetTurnToken())
	if err != nil {
		return nil, err
	}
	if err := s.r.progress(ctx, tr, req.GetNote()); err != nil {
		return nil, status.Error(codes.Unavailable, "progress not recorded: "+err.Error())
	}
	return &pb.ProgressResponse{}, nil
}
