package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/taskhost/taskhost/internal/steprpc"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// errHostProtocol is a host that broke the step's message sequence: a reply
// to a call never made, a second step on the stream.
var errHostProtocol = errors.New("host protocol error")

// pluginStream is the plugin's end of a RunStep stream.
type pluginStream interface {
	Send(*executorpb.PluginMessage) error
	Recv() (*executorpb.HostMessage, error)
}

// streamCalls carries one step's host-service calls on its RunStep stream:
// each call gets the next call id and waits for the reply of that id, which
// the receive loop hands over. It is the step's HostServicesClient, so the
// Host above it is the same whatever the transport.
type streamCalls struct {
	stream pluginStream

	sendMu sync.Mutex // one Send at a time; ids are taken under it, so they go out in order
	lastID uint64

	mu      sync.Mutex
	pending map[uint64]chan *executorpb.ServiceReply
	breach  error // the host's protocol error that ended the step, if any
	// slots bounds the calls in flight. A slot is given back when the
	// call's reply arrives, not when a cancelled call returns: the host
	// counts a call until it answered it.
	slots chan struct{}
	done  chan struct{} // closed when the receive loop ended
	err   error         // why it ended; read after done
}

func newStreamCalls(stream pluginStream) *streamCalls {
	return &streamCalls{stream: stream, pending: map[uint64]chan *executorpb.ServiceReply{},
		slots: make(chan struct{}, steprpc.MaxCallsInFlight), done: make(chan struct{})}
}

func (c *streamCalls) send(m *executorpb.PluginMessage) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(m)
}

// receive hands each reply to its call until the stream ends, then fails
// the calls still waiting. It calls abort when the host broke the protocol,
// which ends the step.
func (c *streamCalls) receive(abort func()) {
	var err error
	for {
		var m *executorpb.HostMessage
		if m, err = c.stream.Recv(); err != nil {
			break
		}
		r := m.GetReply()
		if r == nil {
			err = fmt.Errorf("%w: a message other than a reply during the step", errHostProtocol)
			break
		}
		c.mu.Lock()
		ch, ok := c.pending[r.GetCallId()]
		delete(c.pending, r.GetCallId())
		c.mu.Unlock()
		if !ok {
			err = fmt.Errorf("%w: a reply to call id %d, which is not in flight", errHostProtocol, r.GetCallId())
			break
		}
		ch <- r // buffered: a cancelled call no longer reads it
		<-c.slots
	}
	if errors.Is(err, errHostProtocol) {
		// Recorded before the abort: the executor the abort ends must find
		// the breach in protocolError, or its cancelled call would read as
		// the step's end.
		c.mu.Lock()
		c.breach = err
		c.mu.Unlock()
		abort()
	}
	c.err = err
	close(c.done)
}

// call sends one service call and waits for its reply.
func (c *streamCalls) call(ctx context.Context, method string, sc *executorpb.ServiceCall) (*executorpb.ServiceReply, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-c.done:
		return nil, c.ended()
	}
	ch := make(chan *executorpb.ServiceReply, 1)
	c.sendMu.Lock()
	c.lastID++
	sc.CallId = c.lastID
	msg := &executorpb.PluginMessage{Msg: &executorpb.PluginMessage_Call{Call: sc}}
	if n := proto.Size(msg); n > maxMessageBytes {
		c.lastID--
		c.sendMu.Unlock()
		<-c.slots
		return nil, status.Errorf(codes.InvalidArgument, "%s: request of %d bytes exceeds the %d-byte limit", method, n, maxMessageBytes)
	}
	c.mu.Lock()
	c.pending[sc.CallId] = ch
	c.mu.Unlock()
	err := c.stream.Send(msg)
	c.sendMu.Unlock()
	if err != nil {
		// The stream is broken; the receive loop fails every call.
		<-c.done
		return nil, c.ended()
	}
	select {
	case r := <-ch:
		return r, nil
	case <-c.done:
		return nil, c.ended()
	case <-ctx.Done():
		// The host still answers; the reply gives the slot back.
		_ = c.send(&executorpb.PluginMessage{Msg: &executorpb.PluginMessage_Cancel{Cancel: &executorpb.CancelCall{CallId: sc.CallId}}})
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// ended is the error of a call the stream's end cut off: Canceled when the
// host cancelled the step (its context follows), else Unavailable.
func (c *streamCalls) ended() error {
	if status.Code(c.err) == codes.Canceled {
		return status.Error(codes.Canceled, "the host cancelled the step")
	}
	if c.err == nil || errors.Is(c.err, io.EOF) {
		return status.Error(codes.Unavailable, "the host ended the step's stream")
	}
	return status.Error(codes.Unavailable, c.err.Error())
}

// protocolError is the host's breach of the protocol that ended the step,
// if one did.
func (c *streamCalls) protocolError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.breach
}

// unary makes one call and takes the response of its kind from the reply.
func unary[R any](c *streamCalls, ctx context.Context, method string, sc *executorpb.ServiceCall, get func(*executorpb.ServiceReply) *R) (*R, error) {
	r, err := c.call(ctx, method, sc)
	if err != nil {
		return nil, err
	}
	if e := r.GetError(); e != nil {
		return nil, steprpc.ErrorFromPB(e)
	}
	out := get(r)
	if out == nil {
		return nil, status.Errorf(codes.Internal, "%s: the host answered with a reply of another kind", method)
	}
	return out, nil
}

var _ executorpb.HostServicesClient = (*streamCalls)(nil)

func (c *streamCalls) CallModel(ctx context.Context, in *executorpb.CallModelRequest, _ ...grpc.CallOption) (*executorpb.CallModelResponse, error) {
	return unary(c, ctx, "CallModel", &executorpb.ServiceCall{Request: &executorpb.ServiceCall_CallModel{CallModel: in}}, (*executorpb.ServiceReply).GetCallModel)
}

func (c *streamCalls) CallTool(ctx context.Context, in *executorpb.CallToolRequest, _ ...grpc.CallOption) (*executorpb.CallToolResponse, error) {
	return unary(c, ctx, "CallTool", &executorpb.ServiceCall{Request: &executorpb.ServiceCall_CallTool{CallTool: in}}, (*executorpb.ServiceReply).GetCallTool)
}

func (c *streamCalls) RequestApproval(ctx context.Context, in *executorpb.RequestApprovalRequest, _ ...grpc.CallOption) (*executorpb.RequestApprovalResponse, error) {
	return unary(c, ctx, "RequestApproval", &executorpb.ServiceCall{Request: &executorpb.ServiceCall_RequestApproval{RequestApproval: in}}, (*executorpb.ServiceReply).GetRequestApproval)
}

func (c *streamCalls) RequestInput(ctx context.Context, in *executorpb.RequestInputRequest, _ ...grpc.CallOption) (*executorpb.RequestInputResponse, error) {
	return unary(c, ctx, "RequestInput", &executorpb.ServiceCall{Request: &executorpb.ServiceCall_RequestInput{RequestInput: in}}, (*executorpb.ServiceReply).GetRequestInput)
}

func (c *streamCalls) Progress(ctx context.Context, in *executorpb.ProgressRequest, _ ...grpc.CallOption) (*executorpb.ProgressResponse, error) {
	return unary(c, ctx, "Progress", &executorpb.ServiceCall{Request: &executorpb.ServiceCall_Progress{Progress: in}}, (*executorpb.ServiceReply).GetProgress)
}

func (c *streamCalls) ListTools(ctx context.Context, in *executorpb.ListToolsRequest, _ ...grpc.CallOption) (*executorpb.ListToolsResponse, error) {
	return unary(c, ctx, "ListTools", &executorpb.ServiceCall{Request: &executorpb.ServiceCall_ListTools{ListTools: in}}, (*executorpb.ServiceReply).GetListTools)
}

func (c *streamCalls) AbandonEffect(ctx context.Context, in *executorpb.AbandonEffectRequest, _ ...grpc.CallOption) (*executorpb.AbandonEffectResponse, error) {
	return unary(c, ctx, "AbandonEffect", &executorpb.ServiceCall{Request: &executorpb.ServiceCall_AbandonEffect{AbandonEffect: in}}, (*executorpb.ServiceReply).GetAbandonEffect)
}
