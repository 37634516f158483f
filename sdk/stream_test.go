package sdk

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/internal/steprpc"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// crowdHost holds every Progress call until steprpc.MaxCallsInFlight of
// them wait at once, and records the most that ever waited.
type crowdHost struct {
	executorpb.UnimplementedHostServicesServer
	mu      sync.Mutex
	cur     int
	most    int
	release chan struct{}
}

func (h *crowdHost) Progress(ctx context.Context, _ *executorpb.ProgressRequest) (*executorpb.ProgressResponse, error) {
	h.mu.Lock()
	h.cur++
	h.most = max(h.most, h.cur)
	if h.cur == steprpc.MaxCallsInFlight {
		close(h.release)
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.cur--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
		return &executorpb.ProgressResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// More concurrent host calls than the protocol lets be in flight wait for a
// slot instead of breaking the protocol (the host would end the step as a
// crash).
func TestHostCallsBeyondTheInFlightBound(t *testing.T) {
	const n = steprpc.MaxCallsInFlight + 8
	h := &crowdHost{release: make(chan struct{})}
	errs := make(chan error, n)
	es := newTestServer(t, hostStep(func(ctx context.Context, host Host) error {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { errs <- host.Progress(ctx, "n") })
		}
		wg.Wait()
		return nil
	}), h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := es.step(ctx, &executorpb.StepRequest{Attempt: 1, TurnToken: "t"})
	if err != nil || resp.GetContinue() == nil {
		t.Fatalf("step: (%v, %v)", resp, err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Progress: %v", err)
		}
	}
	if h.most != steprpc.MaxCallsInFlight {
		t.Errorf("at most %d calls were in flight, want %d", h.most, steprpc.MaxCallsInFlight)
	}
}

// A call whose own context ends while its step goes on is cancelled on the
// host (CancelCall), and the step's next call still works.
func TestHostCallCancelledAloneStepGoesOn(t *testing.T) {
	fh := &fakeHost{block: true, called: make(chan string, 2)}
	var first, second error
	es := newTestServer(t, hostStep(func(ctx context.Context, h Host) error {
		callCtx, cancel := context.WithCancel(ctx)
		go func() {
			<-fh.called
			cancel()
		}()
		_, first = h.CallTool(callCtx, ToolRequest{Name: "sleep"})
		fh.set(func(f *fakeHost) { f.block = false })
		second = h.Progress(ctx, "after")
		return nil
	}), fh)
	runStep(t, es, context.Background(), &executorpb.StepRequest{Attempt: 1, TurnToken: "t"})
	if !errors.Is(first, context.Canceled) {
		t.Errorf("cancelled CallTool = %v, want context.Canceled", first)
	}
	if second != nil {
		t.Errorf("Progress after a cancelled call = %v", second)
	}
}

// A host that answers a call the plugin never made broke the protocol: the
// plugin ends the step with Internal instead of handing the answer to
// whatever call is waiting.
func TestHostReplyToUnknownCallEndsStep(t *testing.T) {
	sawCancel := make(chan error, 1)
	_, client := startExecutorServer(t, hostStep(func(ctx context.Context, h Host) error {
		err := h.Progress(ctx, "n")
		sawCancel <- ctx.Err()
		return err
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.RunStep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&executorpb.HostMessage{Msg: &executorpb.HostMessage_Step{Step: &executorpb.StepRequest{TurnToken: "t"}}}); err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil || m.GetCall().GetCallId() != 1 {
		t.Fatalf("first message (%v, %v), want call 1", m, err)
	}
	if err := stream.Send(&executorpb.HostMessage{Msg: &executorpb.HostMessage_Reply{Reply: &executorpb.ServiceReply{CallId: 9,
		Response: &executorpb.ServiceReply_Progress{Progress: &executorpb.ProgressResponse{}}}}}); err != nil {
		t.Fatal(err)
	}
	// A cancellation of call 1 may come first: the breach ended the step.
	for err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "call id 9, which is not in flight") {
		t.Fatalf("stream ended with %v, want Internal naming the call id", err)
	}
	if err := <-sawCancel; !errors.Is(err, context.Canceled) {
		t.Errorf("executor's context after the breach: %v, want cancelled", err)
	}
}

// The first message of a step stream must be the step.
func TestStepStreamMustStartWithStep(t *testing.T) {
	_, client := startExecutorServer(t, hostStep(func(context.Context, Host) error {
		t.Error("executor ran without a step")
		return nil
	}))
	stream, err := client.RunStep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&executorpb.HostMessage{Msg: &executorpb.HostMessage_Reply{Reply: &executorpb.ServiceReply{CallId: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream ended with %v, want InvalidArgument", err)
	}
}
