package api

import (
	"context"
	"errors"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	"github.com/taskhost/taskhost/host/plugin"
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
// not, with what its preflight found — against the binary on disk now, for
// a registry that can check it (*plugin.Registry can).
func (hs *hostService) ListExecutors(ctx context.Context, req *apipb.ListExecutorsRequest) (*apipb.ListExecutorsResponse, error) {
	if _, err := principalOf(ctx); err != nil {
		return nil, err
	}
	return hs.listExecutors(ctx, req.GetModelPreflight()), nil
}

// ExecutorReloader re-reads the daemon's config and applies its executor
// settings; an error means nothing changed.
type ExecutorReloader interface {
	ReloadExecutors(ctx context.Context) error
}

// ReloadExecutors reloads the executor config, for an admin or the
// daemon's own user, and reports the executors as they are afterwards.
func (hs *hostService) ReloadExecutors(ctx context.Context, _ *apipb.ReloadExecutorsRequest) (*apipb.ListExecutorsResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if hs.s.opts.Reloader == nil {
		return nil, statusError(codes.Unimplemented, ReasonInvalidArgument, "this daemon cannot reload its executor config (no config reloader)")
	}
	if !hs.s.isAdmin(p) && !localOwner(ctx) {
		return nil, statusError(codes.PermissionDenied, ReasonNotAdmin,
			"only an admin principal ([api] admins) or the daemon's own user on its unix socket may reload the executor config")
	}
	if err := hs.s.opts.Reloader.ReloadExecutors(ctx); err != nil {
		return nil, statusError(codes.InvalidArgument, ReasonInvalidArgument, "reload: "+err.Error())
	}
	hs.s.log.Info("executor config reloaded", "principal", p)
	return hs.listExecutors(ctx, false), nil
}

// localOwner says whether the caller is the daemon's own uid, or root, on
// the unix socket (a confined process never gets this far).
func localOwner(ctx context.Context) bool {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	pc, ok := pr.AuthInfo.(PeerCred)
	return ok && !pc.Confined && (pc.UID == 0 || int(pc.UID) == os.Getuid())
}

// listExecutors lists the executors and the model's status, checking the
// model now when modelPreflight.
func (hs *hostService) listExecutors(ctx context.Context, modelPreflight bool) *apipb.ListExecutorsResponse {
	reg := hs.s.opts.Executors
	resp := &apipb.ListExecutorsResponse{}
	if m := hs.s.opts.Model; m != nil {
		st := m.Status()
		if modelPreflight {
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
		// A registry that confines its plugins says how (*plugin.Registry does).
		if c, ok := reg.(interface{ Confinement(kind string) string }); ok {
			e.Confinement = c.Confinement(kind)
		}
		var d plugin.Description
		var err error
		if c, ok := reg.(interface {
			Check(ctx context.Context, kind string) (plugin.Description, error)
		}); ok {
			d, err = c.Check(ctx, kind)
		} else {
			d, err = reg.Describe(kind)
		}
		var ue *plugin.UnavailableError
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
	return resp
}

// ListHosts lists the hosts sharing the store. It shows no task, so any
// principal may call it.
func (hs *hostService) ListHosts(ctx context.Context, _ *apipb.ListHostsRequest) (*apipb.ListHostsResponse, error) {
	if _, err := principalOf(ctx); err != nil {
		return nil, err
	}
	if hs.s.opts.Fleet == nil {
		return nil, statusError(codes.Unimplemented, ReasonUnimplemented, "this daemon does not list its hosts (no fleet view)")
	}
	f, err := hs.s.opts.Fleet.Hosts(ctx)
	if err != nil {
		return nil, hs.s.toStatus(ctx, err, "hosts", "")
	}
	resp := &apipb.ListHostsResponse{Self: f.Self, LeaseMs: f.Lease.Milliseconds(), Shared: f.Shared, Truncated: f.Truncated}
	for _, h := range f.Hosts {
		resp.Hosts = append(resp.Hosts, &apipb.FleetHost{
			Id: h.ID, Version: h.Version, StartedUnixNano: nanos(h.StartedAt), HeartbeatUnixNano: nanos(h.HeartbeatAt),
			HeartbeatAgeMs: h.HeartbeatAge.Milliseconds(), TasksOwned: h.Owned, State: h.State, Self: h.Self,
		})
	}
	return resp, nil
}
