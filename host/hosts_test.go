package host

import (
	"context"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// Runner.Hosts shows every host of the store, itself marked self, with the
// live tasks each owns; a host whose heartbeat stops is lost once it is
// older than the lease, not before.
func TestRunnerHosts(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		dir := newSharedStore(t, driver)
		// A's lease is long enough that no sweep takes C's task while the
		// test reads it; the state is judged against it.
		fs := quick
		fs.Lease = 2 * time.Second
		a := newFleetHost(t, dir, "host-a", fs)
		c := newFleetHost(t, dir, "host-c", silent) // registers, then never beats again
		started, _ := blockedStep(c.exe)
		if _, err := c.r.Create(ctx, alice, CreateRequest{Spec: []byte(`{"goal":"on c"}`)}); err != nil {
			t.Fatal(err)
		}
		recv(t, started, "C's step")

		f, err := a.r.Hosts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.Self != "host-a" || f.Lease != fs.Lease || f.Shared != (driver == "postgres") || f.Truncated || len(f.Hosts) != 2 {
			t.Fatalf("fleet %+v", f)
		}
		ha, hc := f.Hosts[0], f.Hosts[1]
		if ha.ID != "host-a" || !ha.Self || ha.State != HostLive || ha.Owned != 0 || ha.Version != "test" {
			t.Errorf("A %+v", ha)
		}
		if hc.ID != "host-c" || hc.Self || hc.State != HostLive || hc.Owned != 1 || hc.HeartbeatAge > fs.Lease {
			t.Errorf("C %+v", hc)
		}

		testwait.Until(t, 10*time.Second, "C to be lost", func() bool {
			f, err = a.r.Hosts(ctx)
			return err == nil && f.Hosts[1].State == HostLost
		})
		if hc := f.Hosts[1]; hc.HeartbeatAge <= fs.Lease {
			t.Errorf("C lost at heartbeat age %v, within the lease %v", hc.HeartbeatAge, fs.Lease)
		}
		if f.Hosts[0].State != HostLive {
			t.Errorf("A, which heartbeats, is %s", f.Hosts[0].State)
		}
	})
}
