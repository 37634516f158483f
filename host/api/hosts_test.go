package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// fakeFleet is a Fleet with fixed answers.
type fakeFleet struct {
	fleet host.Fleet
	hosts map[string]string // task id → lease host
	err   error
}

func (f *fakeFleet) Hosts(context.Context) (host.Fleet, error) { return f.fleet, f.err }

func (f *fakeFleet) TaskHost(_ context.Context, _, id string) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	return f.hosts[id], nil
}

func TestListHosts(t *testing.T) {
	beat := time.Unix(1700000000, 5)
	fleet := host.Fleet{Self: "h-a", Lease: 30 * time.Second, Shared: true, Hosts: []host.FleetHost{
		{HostLoad: store.HostLoad{Host: store.Host{ID: "h-a", Version: "1.2", StartedAt: beat.Add(-time.Hour), HeartbeatAt: beat}, Owned: 3},
			HeartbeatAge: 1500 * time.Millisecond, State: host.HostLive, Self: true},
		{HostLoad: store.HostLoad{Host: store.Host{ID: "h-b", Version: "1.1", StartedAt: beat.Add(-2 * time.Hour), HeartbeatAt: beat.Add(-time.Minute)}, Owned: 1},
			HeartbeatAge: time.Minute, State: host.HostLost},
	}}
	for _, tc := range []struct {
		name     string
		fleet    *fakeFleet
		token    string
		wantCode codes.Code
		reason   string
	}{
		{name: "two hosts", fleet: &fakeFleet{fleet: fleet}, wantCode: codes.OK},
		{name: "a token principal may list them", fleet: &fakeFleet{fleet: fleet}, token: goodToken, wantCode: codes.OK},
		{name: "a wrong token", fleet: &fakeFleet{fleet: fleet}, token: "wrong-token-wrong-token-wrong-token", wantCode: codes.Unauthenticated},
		{name: "no fleet view", wantCode: codes.Unimplemented, reason: ReasonUnimplemented},
		{name: "the store does not answer", fleet: &fakeFleet{err: fmt.Errorf("read: %w", store.ErrUnavailable)}, wantCode: codes.Unavailable, reason: ReasonStoreUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, func(o *Options) {
				if tc.fleet != nil {
					o.Fleet = tc.fleet
				}
			})
			conn := ts.unixConn(t)
			if tc.token != "" {
				conn = ts.tokenConn(t, tc.token)
			}
			resp, err := apipb.NewHostServiceClient(conn).ListHosts(ctxT(t), &apipb.ListHostsRequest{})
			if tc.wantCode != codes.OK {
				wantCode(t, err, tc.wantCode, tc.reason)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Self != "h-a" || resp.LeaseMs != 30000 || !resp.Shared || resp.Truncated || len(resp.Hosts) != 2 {
				t.Fatalf("response %v", resp)
			}
			a, b := resp.Hosts[0], resp.Hosts[1]
			if a.Id != "h-a" || a.Version != "1.2" || a.HeartbeatUnixNano != beat.UnixNano() || a.StartedUnixNano != beat.Add(-time.Hour).UnixNano() ||
				a.HeartbeatAgeMs != 1500 || a.TasksOwned != 3 || a.State != "live" || !a.Self {
				t.Errorf("self host %v", a)
			}
			if b.Id != "h-b" || b.State != "lost" || b.Self || b.HeartbeatAgeMs != 60000 || b.TasksOwned != 1 {
				t.Errorf("other host %v", b)
			}
		})
	}
}

// GetTask names the host of the task's run; without a fleet view the field
// stays empty, and a failing lookup fails the call.
func TestGetTaskLeaseHost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fleet    *fakeFleet
		want     string
		wantCode codes.Code
	}{
		{name: "held by a host", fleet: &fakeFleet{hosts: map[string]string{"t1": "h-b"}}, want: "h-b"},
		{name: "no fleet view", want: ""},
		{name: "the store does not answer", fleet: &fakeFleet{err: fmt.Errorf("read: %w", store.ErrUnavailable)}, wantCode: codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, func(o *Options) {
				if tc.fleet != nil {
					o.Fleet = tc.fleet
				}
			})
			ts.fake.add(self, "t1", store.StatusRunning)
			resp, err := apipb.NewTaskServiceClient(ts.unixConn(t)).GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t1"})
			if tc.wantCode != codes.OK {
				wantCode(t, err, tc.wantCode, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Task.GetLeaseHost(); got != tc.want {
				t.Fatalf("lease_host %q, want %q", got, tc.want)
			}
		})
	}
}
