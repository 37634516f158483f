package steprpc

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/taskhost/taskhost/internal/testwait"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// plugin is a RunStep server whose every step is script: a plugin that
// keeps or breaks the protocol as a test wants.
type plugin struct {
	pb.UnimplementedExecutorServer
	script func(pb.Executor_RunStepServer) error
}

func (p plugin) RunStep(s pb.Executor_RunStepServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	return p.script(s)
}

// dial serves script on a unix socket and returns a client with the host's
// message bound of limit bytes both ways.
func dial(t *testing.T, limit int, script func(pb.Executor_RunStepServer) error) pb.ExecutorClient {
	t.Helper()
	path := filepath.Join(testwait.ShortTempDir(t), "p.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	pb.RegisterExecutorServer(srv, plugin{script: script})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewExecutorClient(conn)
}

// services answers Progress with progress (nil: at once) and records the
// turn tokens it was called with.
type services struct {
	pb.UnimplementedHostServicesServer
	progress func(context.Context, *pb.ProgressRequest) (*pb.ProgressResponse, error)
	toolDesc string // the description ListTools answers with
	mu       sync.Mutex
	tokens   []string
}

func (s *services) Progress(ctx context.Context, in *pb.ProgressRequest) (*pb.ProgressResponse, error) {
	s.mu.Lock()
	s.tokens = append(s.tokens, in.GetTurnToken())
	s.mu.Unlock()
	if s.progress != nil {
		return s.progress(ctx, in)
	}
	return &pb.ProgressResponse{}, nil
}

func (s *services) ListTools(context.Context, *pb.ListToolsRequest) (*pb.ListToolsResponse, error) {
	return &pb.ListToolsResponse{Tools: []*pb.ToolSpec{{Name: "t", Description: s.toolDesc}}}, nil
}

func progressCall(id uint64, note string) *pb.PluginMessage {
	return &pb.PluginMessage{Msg: &pb.PluginMessage_Call{Call: &pb.ServiceCall{CallId: id,
		Request: &pb.ServiceCall_Progress{Progress: &pb.ProgressRequest{TurnToken: "forged", Note: note}}}}}
}

func cancelCall(id uint64) *pb.PluginMessage {
	return &pb.PluginMessage{Msg: &pb.PluginMessage_Cancel{Cancel: &pb.CancelCall{CallId: id}}}
}

var done = &pb.PluginMessage{Msg: &pb.PluginMessage_Result{Result: &pb.StepResponse{
	Outcome: &pb.StepResponse_Continue{Continue: &pb.StepContinue{Summary: "ok"}}}}}

// sends is a script that sends msgs, then waits for the host to end the
// stream.
func sends(msgs ...*pb.PluginMessage) func(pb.Executor_RunStepServer) error {
	return func(s pb.Executor_RunStepServer) error {
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				return err
			}
		}
		<-s.Context().Done()
		return nil
	}
}

func drive(t *testing.T, client pb.ExecutorClient, srv pb.HostServicesServer, limit int) (*pb.StepResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.RunStep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return Drive(ctx, stream, &pb.StepRequest{TurnToken: "turn-1"}, srv, Limits{MaxMessage: limit})
}

// A plugin that breaks the message sequence ends the step with a
// *ProtocolError naming the breach; before protocol 2 there was no call id
// to get wrong.
func TestDriveProtocolErrors(t *testing.T) {
	const limit = 1 << 16
	for _, tc := range []struct {
		name   string
		script func(pb.Executor_RunStepServer) error
		want   string
	}{
		{"call id 0", sends(progressCall(0, "n")), "call id 0 repeated or not above"},
		{"call id repeated", sends(progressCall(1, "n"), progressCall(1, "n")), "call id 1 repeated"},
		{"call id going back", sends(progressCall(5, "n"), progressCall(4, "n")), "call id 4 repeated or not above the step's last call id 5"},
		{"cancel of a call never sent", sends(progressCall(1, "n"), cancelCall(2)), "cancel of call id 2, which was never sent"},
		{"call with no request", sends(&pb.PluginMessage{Msg: &pb.PluginMessage_Call{Call: &pb.ServiceCall{CallId: 1}}}), "call 1 has no request"},
		{"message of no kind", sends(&pb.PluginMessage{}), "no known kind"},
		{"result with no outcome", sends(&pb.PluginMessage{Msg: &pb.PluginMessage_Result{Result: &pb.StepResponse{}}}), "no outcome"},
		{"stream ended without a result", func(pb.Executor_RunStepServer) error { return nil }, "without a step result"},
		{"message over the limit", sends(progressCall(1, strings.Repeat("x", limit))), "beyond the 65536-byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := drive(t, dial(t, limit, tc.script), &services{}, limit)
			var pe *ProtocolError
			if !errors.As(err, &pe) || !errors.Is(err, ErrProtocol) || !strings.Contains(pe.Detail, tc.want) {
				t.Fatalf("Drive = %v, want a protocol error saying %q", err, tc.want)
			}
		})
	}
}

// A message of exactly the limit crosses; one byte more is the plugin's
// protocol error.
func TestDriveMessageAtTheLimit(t *testing.T) {
	const limit = 1 << 16
	note := func(size int) string {
		n := size - proto.Size(progressCall(1, ""))
		for proto.Size(progressCall(1, strings.Repeat("x", n))) > size {
			n--
		}
		return strings.Repeat("x", n)
	}
	at := note(limit)
	if got := proto.Size(progressCall(1, at)); got != limit {
		t.Fatalf("test message is %d bytes, want %d", got, limit)
	}
	svc := &services{}
	res, err := drive(t, dial(t, limit, func(s pb.Executor_RunStepServer) error {
		if err := s.Send(progressCall(1, at)); err != nil {
			return err
		}
		if _, err := s.Recv(); err != nil {
			return err
		}
		return s.Send(done)
	}), svc, limit)
	if err != nil || res.GetContinue().GetSummary() != "ok" {
		t.Fatalf("a message at the limit: (%v, %v)", res, err)
	}
	_, err = drive(t, dial(t, limit, sends(progressCall(1, at+"x"))), svc, limit)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("a message one byte past the limit: %v, want a protocol error", err)
	}
}

// MaxCallsInFlight calls may wait at once; one more is a protocol error.
func TestDriveCallsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls int
		ok    bool
	}{
		{"at the bound", MaxCallsInFlight, true},
		{"past the bound", MaxCallsInFlight + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var arrived atomic.Int64
			release := make(chan struct{})
			svc := &services{progress: func(ctx context.Context, _ *pb.ProgressRequest) (*pb.ProgressResponse, error) {
				// Past the bound, none is answered: a call that ended
				// would free its place before the last one arrived.
				if arrived.Add(1) == MaxCallsInFlight && tc.ok {
					close(release)
				}
				select {
				case <-release:
					return &pb.ProgressResponse{}, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}}
			res, err := drive(t, dial(t, 1<<20, func(s pb.Executor_RunStepServer) error {
				for i := range tc.calls {
					if err := s.Send(progressCall(uint64(i+1), "n")); err != nil {
						return err
					}
				}
				for range tc.calls {
					m, err := s.Recv()
					if err != nil {
						return err
					}
					if m.GetReply().GetProgress() == nil {
						return status.Errorf(codes.Internal, "reply %v", m)
					}
				}
				return s.Send(done)
			}), svc, 1<<20)
			if tc.ok && (err != nil || res.GetContinue() == nil) {
				t.Fatalf("%d calls in flight: (%v, %v)", tc.calls, res, err)
			}
			if !tc.ok && (!errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "the limit is 32")) {
				t.Fatalf("%d calls in flight: %v, want a protocol error naming the limit", tc.calls, err)
			}
		})
	}
}

// Every call is stamped with the step's turn token, whatever the plugin
// sent; a handler's error crosses with its code, reason and metadata; a
// reply too large to send becomes an error the SDK reads as such.
func TestDriveRepliesAndTokens(t *testing.T) {
	const limit = 1 << 16
	calls := 0
	svc := &services{progress: func(context.Context, *pb.ProgressRequest) (*pb.ProgressResponse, error) {
		calls++
		if calls == 1 {
			st, _ := status.New(codes.FailedPrecondition, "unsettled").WithDetails(&errdetails.ErrorInfo{Reason: "EFFECT_UNSETTLED", Domain: ErrorDomain, Metadata: map[string]string{"seq": "3"}})
			return nil, st.Err()
		}
		return &pb.ProgressResponse{}, nil
	}, toolDesc: strings.Repeat("y", limit)}
	var replies []*pb.ServiceReply
	res, err := drive(t, dial(t, limit, func(s pb.Executor_RunStepServer) error {
		for i, m := range []*pb.PluginMessage{progressCall(1, "a"), progressCall(2, "b"),
			{Msg: &pb.PluginMessage_Call{Call: &pb.ServiceCall{CallId: 3, Request: &pb.ServiceCall_ListTools{ListTools: &pb.ListToolsRequest{}}}}}} {
			if err := s.Send(m); err != nil {
				return err
			}
			r, err := s.Recv()
			if err != nil {
				return err
			}
			if r.GetReply().GetCallId() != uint64(i+1) {
				return status.Errorf(codes.Internal, "reply %v to call %d", r, i+1)
			}
			replies = append(replies, r.GetReply())
		}
		return s.Send(done)
	}), svc, limit)
	if err != nil || res.GetContinue() == nil {
		t.Fatalf("Drive: (%v, %v)", res, err)
	}
	if got := svc.tokens; len(got) != 2 || got[0] != "turn-1" || got[1] != "turn-1" {
		t.Errorf("handler saw turn tokens %q, want the step's", got)
	}
	e := replies[0].GetError()
	if e.GetCode() != uint32(codes.FailedPrecondition) || e.GetReason() != "EFFECT_UNSETTLED" || e.GetMetadata()["seq"] != "3" {
		t.Errorf("error reply %v", e)
	}
	back := status.Convert(ErrorFromPB(e))
	if back.Code() != codes.FailedPrecondition || len(back.Details()) != 1 {
		t.Errorf("ErrorFromPB = %v, details %v", back, back.Details())
	}
	if replies[1].GetProgress() == nil {
		t.Errorf("second reply %v, want a progress response", replies[1])
	}
	if e := replies[2].GetError(); e.GetCode() != uint32(codes.ResourceExhausted) || !strings.Contains(e.GetMessage(), "larger than max") {
		t.Errorf("oversized reply became %v, want ResourceExhausted larger than max", replies[2])
	}
}

// CancelCall cancels the host's handler of that call, which still replies;
// cancelling the stream cancels every handler, and Drive returns only once
// they all have.
func TestDriveCancellation(t *testing.T) {
	started := make(chan struct{}, 2)
	var ended atomic.Int64
	svc := &services{progress: func(ctx context.Context, _ *pb.ProgressRequest) (*pb.ProgressResponse, error) {
		started <- struct{}{}
		<-ctx.Done()
		ended.Add(1)
		return nil, ctx.Err()
	}}
	client := dial(t, 1<<20, func(s pb.Executor_RunStepServer) error {
		if err := s.Send(progressCall(1, "a")); err != nil {
			return err
		}
		if err := s.Send(cancelCall(1)); err != nil {
			return err
		}
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if r.GetReply().GetError().GetCode() != uint32(codes.Canceled) {
			return status.Errorf(codes.Internal, "reply to a cancelled call: %v", r)
		}
		if err := s.Send(progressCall(2, "b")); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.RunStep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-started
		<-started // the second call is running: the first was answered
		cancel()
	}()
	_, err = Drive(ctx, stream, &pb.StepRequest{TurnToken: "t"}, svc, Limits{MaxMessage: 1 << 20})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Drive = %v, want context.Canceled", err)
	}
	if n := ended.Load(); n != 2 {
		t.Fatalf("%d handlers had returned when Drive did, want 2", n)
	}
}
