package api

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// readyTimeout bounds the readiness probe of one health check.
const readyTimeout = 5 * time.Second

// apiServices are the services a health check may name; "" is the whole
// server.
var apiServices = []string{
	"",
	apipb.TaskService_ServiceDesc.ServiceName,
	apipb.ApprovalService_ServiceDesc.ServiceName,
	apipb.HostService_ServiceDesc.ServiceName,
}

// healthService is the standard grpc.health.v1 service. Check answers from
// the daemon's state at the time of the call: NOT_SERVING once Stop has
// begun or while Options.Ready fails (the store does not answer a read),
// else SERVING. Watch and List report the status the server last set, which
// Stop turns to NOT_SERVING. Like every call, a health check is
// authenticated: a load balancer needs a principal (its uid or a token).
type healthService struct {
	*health.Server
	s *Server
}

// registerOperability registers the health service and server reflection
// (grpc.reflection.v1), with which grpcurl lists and calls the API.
func (s *Server) registerOperability(g *grpc.Server) {
	hs := &healthService{Server: health.NewServer(), s: s}
	for _, name := range apiServices {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	s.health = hs
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
}

func (h *healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if _, err := h.Server.Check(ctx, req); err != nil {
		return nil, err // NotFound for a service the server does not have
	}
	if h.s.stopping() {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	if ready := h.s.opts.Ready; ready != nil {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			h.s.log.Warn("health check: not ready", "error", err)
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// shutdownHealth turns every service NOT_SERVING for Watch and List.
func (s *Server) shutdownHealth() {
	if s.health != nil {
		s.health.Shutdown()
	}
}
