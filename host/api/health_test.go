package api

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestHealthCheck answers SERVING for the server and each API service,
// NOT_SERVING while Options.Ready fails (the store does not answer) and
// again SERVING when it recovers; an unknown service is NotFound, and a
// caller without a principal is refused like any other call.
func TestHealthCheck(t *testing.T) {
	var storeErr atomic.Pointer[error]
	ts := startServer(t, func(o *Options) {
		o.Ready = func(context.Context) error {
			if p := storeErr.Load(); p != nil {
				return *p
			}
			return nil
		}
	})
	hc := healthpb.NewHealthClient(ts.unixConn(t))
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		return resp.GetStatus()
	}
	for _, svc := range []string{"", "taskhost.api.v1.TaskService", "taskhost.api.v1.ApprovalService", "taskhost.api.v1.HostService"} {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, want SERVING", svc, got)
		}
	}
	closed := errors.New("sql: database is closed")
	storeErr.Store(&closed)
	if got := check(""); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("with the store failing: %v, want NOT_SERVING", got)
	}
	storeErr.Store(nil)
	if got := check(""); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("with the store back: %v, want SERVING", got)
	}
	_, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: "taskhost.api.v1.NoSuchService"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service: %v, want NotFound", err)
	}
	_, err = healthpb.NewHealthClient(ts.tokenConn(t, "")).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Check without a token on TCP: %v, want Unauthenticated", err)
	}
}

// TestHealthWatchSeesStop streams SERVING, then NOT_SERVING once Stop
// begins.
func TestHealthWatchSeesStop(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w, err := healthpb.NewHealthClient(ts.unixConn(t)).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch status: %v, %v; want SERVING", first.GetStatus(), err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		ts.srv.Stop(sctx)
	}()
	next, err := w.Recv()
	if err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch status after Stop: %v, %v; want NOT_SERVING", next.GetStatus(), err)
	}
	cancel()
	<-stopped
}

// TestReflectionListsTheAPI lists the API's services through server
// reflection, as grpcurl does, and resolves one to its file.
func TestReflectionListsTheAPI(t *testing.T) {
	ts := startServer(t)
	stream, err := reflectionpb.NewServerReflectionClient(ts.unixConn(t)).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"taskhost.api.v1.TaskService", "taskhost.api.v1.ApprovalService", "taskhost.api.v1.HostService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, want %s among them", names, want)
		}
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "taskhost.api.v1.TaskService"}}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if fds := resp.GetFileDescriptorResponse().GetFileDescriptorProto(); len(fds) == 0 {
		t.Errorf("no file descriptor for taskhost.api.v1.TaskService: %v", resp)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}
