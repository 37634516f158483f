package sdk

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/taskhost/taskhost/internal/steprpc"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// funcExecutor is an Executor whose Step is a function.
type funcExecutor struct {
	step func(ctx context.Context, host Host, req StepRequest) (StepResult, error)
}

func (funcExecutor) Describe() Description {
	return Description{Kind: "sdktest", Version: "0.0.1", CheckpointSchemas: []string{"sdktest/1"}}
}

func (f funcExecutor) Step(ctx context.Context, host Host, req StepRequest) (StepResult, error) {
	return f.step(ctx, host, req)
}

// listenUnix listens on a fresh unix socket and returns the listener and its
// path.
func listenUnix(t *testing.T, name string) (net.Listener, string) {
	t.Helper()
	path := filepath.Join(testwait.ShortTempDir(t), name)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return lis, path
}

// dialUnix is a client connection to a unix socket, with the limits given.
func dialUnix(t *testing.T, path string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient("unix://"+path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// bigCallOptions lets a test client send and receive more than the protocol
// allows, so that the limit under test is the other side's.
func bigCallOptions() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))
}

// startExecutorServer serves e the way Serve does (same server options, same
// service), minus go-plugin, on a unix socket, and returns the server side
// and a client with generous limits.
func startExecutorServer(t *testing.T, e Executor) (*executorServer, executorpb.ExecutorClient) {
	t.Helper()
	lis, path := listenUnix(t, "executor.sock")
	srv := newGRPCServer(nil)
	es := newExecutorServer(e, newStepGate(), hclog.NewNullLogger())
	executorpb.RegisterExecutorServer(srv, es)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return es, executorpb.NewExecutorClient(dialUnix(t, path, bigCallOptions()))
}

// driveStep runs in on a RunStep stream of client the way the host does
// (steprpc.Drive, the host's limits), answering service calls with fh; nil
// answers every call Unimplemented.
func driveStep(ctx context.Context, client executorpb.ExecutorClient, in *executorpb.StepRequest, fh executorpb.HostServicesServer) (*executorpb.StepResponse, error) {
	if fh == nil {
		fh = executorpb.UnimplementedHostServicesServer{}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.RunStep(ctx)
	if err != nil {
		return nil, err
	}
	return steprpc.Drive(ctx, stream, in, fh, steprpc.Limits{MaxMessage: maxMessageBytes})
}

// stepper is an executor served over gRPC with a fake host behind its
// steps' service calls.
type stepper struct {
	es     *executorServer
	client executorpb.ExecutorClient
	fh     executorpb.HostServicesServer
}

func newTestServer(t *testing.T, e Executor, fh executorpb.HostServicesServer) *stepper {
	t.Helper()
	es, client := startExecutorServer(t, e)
	return &stepper{es: es, client: client, fh: fh}
}

func (s *stepper) step(ctx context.Context, in *executorpb.StepRequest) (*executorpb.StepResponse, error) {
	return driveStep(ctx, s.client, in, s.fh)
}

// fakeHost is a scripted HostServices server that records what it receives.
type fakeHost struct {
	executorpb.UnimplementedHostServicesServer

	mu        sync.Mutex
	tokens    []string
	models    []*executorpb.CallModelRequest
	tools     []*executorpb.CallToolRequest
	prompts   []string
	notes     []string
	err       error // when set, every call fails with it
	model     *executorpb.CallModelResponse
	tool      *executorpb.CallToolResponse
	decision  string
	answer    string // what RequestInput answers
	toolSpecs []*executorpb.ToolSpec
	// called, when set, receives the method name of every call as it
	// arrives.
	called chan string
	// block makes calls wait for their context to end.
	block bool
}

func (f *fakeHost) record(ctx context.Context, method, token string) error {
	f.mu.Lock()
	f.tokens = append(f.tokens, token)
	err, block, called := f.err, f.block, f.called
	f.mu.Unlock()
	if called != nil {
		called <- method
	}
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (f *fakeHost) CallModel(ctx context.Context, in *executorpb.CallModelRequest) (*executorpb.CallModelResponse, error) {
	if err := f.record(ctx, "CallModel", in.GetTurnToken()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.models = append(f.models, in)
	if f.model != nil {
		return f.model, nil
	}
	return &executorpb.CallModelResponse{}, nil
}

func (f *fakeHost) CallTool(ctx context.Context, in *executorpb.CallToolRequest) (*executorpb.CallToolResponse, error) {
	if err := f.record(ctx, "CallTool", in.GetTurnToken()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tools = append(f.tools, in)
	if f.tool != nil {
		return f.tool, nil
	}
	return &executorpb.CallToolResponse{}, nil
}

func (f *fakeHost) RequestApproval(ctx context.Context, in *executorpb.RequestApprovalRequest) (*executorpb.RequestApprovalResponse, error) {
	if err := f.record(ctx, "RequestApproval", in.GetTurnToken()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prompts = append(f.prompts, in.GetPrompt())
	return &executorpb.RequestApprovalResponse{Decision: f.decision}, nil
}

func (f *fakeHost) RequestInput(ctx context.Context, in *executorpb.RequestInputRequest) (*executorpb.RequestInputResponse, error) {
	if err := f.record(ctx, "RequestInput", in.GetTurnToken()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prompts = append(f.prompts, in.GetQuestion())
	return &executorpb.RequestInputResponse{ValueJson: f.answer}, nil
}

func (f *fakeHost) Progress(ctx context.Context, in *executorpb.ProgressRequest) (*executorpb.ProgressResponse, error) {
	if err := f.record(ctx, "Progress", in.GetTurnToken()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notes = append(f.notes, in.GetNote())
	return &executorpb.ProgressResponse{}, nil
}

func (f *fakeHost) ListTools(ctx context.Context, in *executorpb.ListToolsRequest) (*executorpb.ListToolsResponse, error) {
	if err := f.record(ctx, "ListTools", in.GetTurnToken()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &executorpb.ListToolsResponse{Tools: f.toolSpecs}, nil
}

func (f *fakeHost) set(fn func(f *fakeHost)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeHost) seenTokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tokens...)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
