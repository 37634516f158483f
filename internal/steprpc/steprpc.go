// Package steprpc is executor protocol 2's RunStep stream as the host drives
// it (Drive: send the step, answer the plugin's service calls with a
// HostServices handler, take its result) and a service error's conversion
// to and from the wire (ErrorToPB, ErrorFromPB), which both ends share. The
// host's seam (host/plugin) and the SDK's tests drive steps through it, so
// there is one reading of the message sequence.
package steprpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// MaxCallsInFlight bounds the service calls of one step that are sent and
// not yet answered. The SDK waits for a slot; a plugin that sends more
// breaks the protocol.
const MaxCallsInFlight = 32

// ErrorDomain is the ErrorInfo domain of the host's service errors.
const ErrorDomain = "taskhost.dev"

// ErrProtocol matches every *ProtocolError.
var ErrProtocol = errors.New("executor protocol error")

// ProtocolError is a plugin that broke the RunStep message sequence: a call
// id repeated or never sent, too many calls in flight, a message too large
// or of no known kind, a stream ended without a result.
type ProtocolError struct{ Detail string }

func (e *ProtocolError) Error() string   { return "executor protocol error: " + e.Detail }
func (e *ProtocolError) Is(t error) bool { return t == ErrProtocol }

// HostStream is the host's end of a RunStep stream.
type HostStream interface {
	Send(*pb.HostMessage) error
	Recv() (*pb.PluginMessage, error)
}

// Limits bound a step's stream on the host's side.
type Limits struct {
	MaxMessage int // bytes of one message either way; the gRPC limit
	MaxCalls   int // calls in flight; 0 means MaxCallsInFlight
}

// Drive runs one step on stream: it sends req, answers each service call of
// the plugin with srv (stamped with req's turn token, whatever the plugin
// put there), and returns the plugin's result. ctx must be the stream's
// context. Every call srv runs has returned when Drive does.
//
// It returns a *ProtocolError when the plugin breaks the sequence, and
// otherwise the stream's own error (a gRPC status; the context's when ctx
// ended), which the caller classifies.
func Drive(ctx context.Context, stream HostStream, req *pb.StepRequest, srv pb.HostServicesServer, lim Limits) (*pb.StepResponse, error) {
	if lim.MaxCalls <= 0 {
		lim.MaxCalls = MaxCallsInFlight
	}
	callCtx, cancelCalls := context.WithCancel(ctx)
	defer cancelCalls()
	var sendMu sync.Mutex
	send := func(m *pb.HostMessage) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	if err := send(&pb.HostMessage{Msg: &pb.HostMessage_Step{Step: req}}); err != nil {
		return nil, recvError(ctx, err, lim)
	}
	calls := &callTable{inflight: map[uint64]context.CancelFunc{}, max: lim.MaxCalls}
	defer func() {
		cancelCalls()
		calls.wg.Wait()
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil, recvError(ctx, err, lim)
		}
		switch x := m.GetMsg().(type) {
		case *pb.PluginMessage_Result:
			if x.Result.GetOutcome() == nil {
				return nil, &ProtocolError{Detail: "the step result has no outcome"}
			}
			return x.Result, nil
		case *pb.PluginMessage_Cancel:
			if err := calls.cancel(x.Cancel.GetCallId()); err != nil {
				return nil, err
			}
		case *pb.PluginMessage_Call:
			cctx, done, err := calls.start(callCtx, x.Call)
			if err != nil {
				return nil, err
			}
			go func() {
				defer done()
				reply := Dispatch(cctx, srv, req.GetTurnToken(), x.Call)
				if lim.MaxMessage > 0 {
					if n := proto.Size(&pb.HostMessage{Msg: &pb.HostMessage_Reply{Reply: reply}}); n > lim.MaxMessage {
						// The SDK reads grpc's wording of an oversized message as
						// the executor's request being too large, not a budget.
						reply = errorReply(reply.GetCallId(), status.Errorf(codes.ResourceExhausted, "reply of %d bytes is larger than max (%d bytes)", n, lim.MaxMessage))
					}
				}
				// A send after the step ended fails; nobody waits for it.
				_ = send(&pb.HostMessage{Msg: &pb.HostMessage_Reply{Reply: reply}})
			}()
		default:
			return nil, &ProtocolError{Detail: "a message of no known kind"}
		}
	}
}

// callTable is a step's service calls in flight: their ids, strictly
// increasing, and the cancel of each.
type callTable struct {
	mu       sync.Mutex
	inflight map[uint64]context.CancelFunc
	lastID   uint64 // read and written by Drive's loop only
	max      int
	wg       sync.WaitGroup
}

// start admits call: a new id, above the last, within the bound of calls
// in flight. It returns the call's context and what its goroutine calls
// when it has answered.
func (c *callTable) start(ctx context.Context, call *pb.ServiceCall) (context.Context, func(), error) {
	id := call.GetCallId()
	if id <= c.lastID {
		return nil, nil, &ProtocolError{Detail: fmt.Sprintf("call id %d repeated or not above the step's last call id %d", id, c.lastID)}
	}
	if call.GetRequest() == nil {
		return nil, nil, &ProtocolError{Detail: fmt.Sprintf("call %d has no request of a known kind", id)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.inflight); n >= c.max {
		return nil, nil, &ProtocolError{Detail: fmt.Sprintf("call %d would be call %d in flight; the limit is %d", id, n+1, c.max)}
	}
	c.lastID = id
	cctx, cancel := context.WithCancel(ctx)
	c.inflight[id] = cancel
	c.wg.Add(1)
	return cctx, func() {
		c.mu.Lock()
		delete(c.inflight, id)
		c.mu.Unlock()
		cancel()
		c.wg.Done()
	}, nil
}

// cancel cancels call id if it is still in flight; an id never sent breaks
// the protocol.
func (c *callTable) cancel(id uint64) error {
	if id == 0 || id > c.lastID {
		return &ProtocolError{Detail: fmt.Sprintf("cancel of call id %d, which was never sent (last call id %d)", id, c.lastID)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cancel, ok := c.inflight[id]; ok {
		cancel()
	}
	return nil
}

// recvError is the error of a broken stream as Drive reports it: the
// context's when ctx ended, a *ProtocolError for a plugin's oversized
// message or a stream ended without a result, else the stream's status.
func recvError(ctx context.Context, err error, lim Limits) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, io.EOF) {
		return &ProtocolError{Detail: "the plugin ended the stream without a step result"}
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.ResourceExhausted {
		return &ProtocolError{Detail: fmt.Sprintf("a message beyond the %d-byte limit: %s", lim.MaxMessage, st.Message())}
	}
	return err
}

// Dispatch runs one service call with srv, its request stamped with token,
// and returns its reply.
func Dispatch(ctx context.Context, srv pb.HostServicesServer, token string, call *pb.ServiceCall) *pb.ServiceReply {
	id := call.GetCallId()
	r := &pb.ServiceReply{CallId: id}
	var err error
	switch q := call.GetRequest().(type) {
	case *pb.ServiceCall_CallModel:
		q.CallModel.TurnToken = token
		var out *pb.CallModelResponse
		if out, err = srv.CallModel(ctx, q.CallModel); err == nil {
			r.Response = &pb.ServiceReply_CallModel{CallModel: orEmpty(out)}
		}
	case *pb.ServiceCall_CallTool:
		q.CallTool.TurnToken = token
		var out *pb.CallToolResponse
		if out, err = srv.CallTool(ctx, q.CallTool); err == nil {
			r.Response = &pb.ServiceReply_CallTool{CallTool: orEmpty(out)}
		}
	case *pb.ServiceCall_RequestApproval:
		q.RequestApproval.TurnToken = token
		var out *pb.RequestApprovalResponse
		if out, err = srv.RequestApproval(ctx, q.RequestApproval); err == nil {
			r.Response = &pb.ServiceReply_RequestApproval{RequestApproval: orEmpty(out)}
		}
	case *pb.ServiceCall_RequestInput:
		q.RequestInput.TurnToken = token
		var out *pb.RequestInputResponse
		if out, err = srv.RequestInput(ctx, q.RequestInput); err == nil {
			r.Response = &pb.ServiceReply_RequestInput{RequestInput: orEmpty(out)}
		}
	case *pb.ServiceCall_Progress:
		q.Progress.TurnToken = token
		var out *pb.ProgressResponse
		if out, err = srv.Progress(ctx, q.Progress); err == nil {
			r.Response = &pb.ServiceReply_Progress{Progress: orEmpty(out)}
		}
	case *pb.ServiceCall_ListTools:
		q.ListTools.TurnToken = token
		var out *pb.ListToolsResponse
		if out, err = srv.ListTools(ctx, q.ListTools); err == nil {
			r.Response = &pb.ServiceReply_ListTools{ListTools: orEmpty(out)}
		}
	case *pb.ServiceCall_AbandonEffect:
		q.AbandonEffect.TurnToken = token
		var out *pb.AbandonEffectResponse
		if out, err = srv.AbandonEffect(ctx, q.AbandonEffect); err == nil {
			r.Response = &pb.ServiceReply_AbandonEffect{AbandonEffect: orEmpty(out)}
		}
	default:
		err = status.Error(codes.Unimplemented, "a service call of no known kind")
	}
	if err != nil {
		return errorReply(id, err)
	}
	return r
}

// orEmpty is out, or an empty message when a handler answered nil.
func orEmpty[T any, P interface {
	*T
	proto.Message
}](out P) P {
	if out == nil {
		return new(T)
	}
	return out
}

func errorReply(id uint64, err error) *pb.ServiceReply {
	return &pb.ServiceReply{CallId: id, Response: &pb.ServiceReply_Error{Error: ErrorToPB(err)}}
}

// ErrorToPB is a handler's error as the wire carries it: its gRPC status
// code and message (a context's error as Canceled or DeadlineExceeded), and
// its ErrorInfo's reason and metadata.
func ErrorToPB(err error) *pb.ServiceError {
	st, ok := status.FromError(err)
	if !ok && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		st = status.FromContextError(err)
	}
	e := &pb.ServiceError{Code: uint32(st.Code()), Message: st.Message()}
	if e.Code == uint32(codes.OK) {
		e.Code = uint32(codes.Unknown)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			e.Reason, e.Metadata = info.GetReason(), info.GetMetadata()
			break
		}
	}
	return e
}

// ErrorFromPB is the gRPC status error e describes, with an ErrorInfo in
// ErrorDomain when it has a reason. A code of OK is no error on the wire's
// terms: it reads as Unknown.
func ErrorFromPB(e *pb.ServiceError) error {
	code := codes.Code(e.GetCode())
	if code == codes.OK {
		code = codes.Unknown
	}
	st := status.New(code, e.GetMessage())
	if e.GetReason() != "" {
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: e.GetReason(), Domain: ErrorDomain, Metadata: e.GetMetadata()}); err == nil {
			st = d
		}
	}
	return st.Err()
}
