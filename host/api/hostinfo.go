package api

import (
	"context"
	"errors"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

type hostService struct {
	apipb.UnimplementedHostServiceServer
	s *Server
}

func (hs *hostService) GetInfo(ctx context.Context, _ *apipb.GetInfoRequest) (*apipb.GetInfoResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	return &apipb.GetInfoResponse{Version: hs.s.opts.Version, ApiVersion: APIVersion, Principal: p, DefaultExecutor: hs.s.opts.DefaultExecutor}, nil
}

// ListExecutors reports every executor kind the daemon knows, available or
// not, with what its preflight found.
func (hs *hostService) ListExecutors(ctx context.Context, req *apipb.ListExecutorsRequest) (*apipb.ListExecutorsResponse, error) {
	if _, err := principalOf(ctx); err != nil {
		return nil, err
	}
	reg := hs.s.opts.Executors
	resp := &apipb.ListExecutorsResponse{}
	if m := hs.s.opts.Model; m != nil {
		st := m.Status()
		if req.GetModelPreflight() {
			st = m.Check(ctx)
		}
		resp.Model = &apipb.ModelStatus{Provider: st.Provider, Name: st.Name, Preflight: st.Preflight,
			CheckedUnixNano: nanos(st.Checked), Ok: st.OK, Kind: st.Kind, Message: st.Message}
	}
	for _, kind := range reg.Kinds() {
		e := &apipb.Executor{Kind: kind, Default: kind == hs.s.opts.DefaultExecutor}
		if spec, ok := reg.Spec(kind); ok {
			e.Path, e.Sha256 = spec.Path, spec.SHA256
		}
		// A registry that confines its plugins says how (*host.Registry does).
		if c, ok := reg.(interface{ Confinement(kind string) string }); ok {
			e.Confinement = c.Confinement(kind)
		}
		d, err := reg.Describe(kind)
		var ue *host.UnavailableError
		switch {
		case err == nil:
			e.Available = true
			e.Version, e.ProtocolVersion = d.Version, int32(d.ProtocolVersion)
			e.CheckpointSchemas, e.Capabilities, e.Runtime = d.CheckpointSchemas, d.Capabilities, d.Runtime
		case errors.As(err, &ue):
			e.UnavailableCheck, e.UnavailableDetail = ue.Check, ue.Detail
		default:
			e.UnavailableCheck, e.UnavailableDetail = "describe", err.Error()
		}
		resp.Executors = append(resp.Executors, e)
	}
	return resp, nil
}
