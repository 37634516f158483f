package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// BenchmarkFleetCancel measures how long a cancel takes to reach a running
// step's context: through the host that runs it (local, the baseline) and
// through another host of the fleet sharing the store (cross-host, carried
// by the store and the owner's lease watch: on SQLite by its poll, at 10 ms
// and at the default 250 ms; on PostgreSQL by LISTEN/NOTIFY). It reports the
// median as ms/cancel; ns/op includes each iteration's set-up.
func BenchmarkFleetCancel(b *testing.B) {
	def := DefaultSettings().Fleet
	defPoll := FleetSettings{Heartbeat: quick.Heartbeat, Lease: quick.Lease, Poll: def.Poll}
	for _, c := range []struct {
		name   string
		driver string
		cross  bool
		fs     FleetSettings
	}{
		{"sqlite/local", "sqlite", false, quick},
		{"sqlite/cross-host/poll=10ms", "sqlite", true, quick},
		{"sqlite/cross-host/poll=250ms(default)", "sqlite", true, defPoll},
		{"postgres/local", "postgres", false, defPoll},
		{"postgres/cross-host/notify+poll=250ms(default)", "postgres", true, defPoll},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := newSharedStore(b, c.driver)
			a := benchFleetHost(b, dir, "host-a", c.fs)
			via := a
			if c.cross {
				via = benchFleetHost(b, dir, "host-b", c.fs)
			}
			started, causes := blockedStep(a.exe)
			var lat []time.Duration
			for b.Loop() {
				task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"bench"}`)})
				if err != nil {
					b.Fatal(err)
				}
				<-started
				// A cancel comes at any moment of the owner's poll cycle,
				// not in step with it (each iteration lasts about one).
				time.Sleep(rand.N(c.fs.Poll))
				t0 := time.Now()
				if _, err := via.r.Cancel(context.Background(), alice, task.ID); err != nil {
					b.Fatal(err)
				}
				<-causes
				lat = append(lat, time.Since(t0))
				if err := a.r.Wait(context.Background(), task.ID); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(median(lat).Seconds()*1000, "ms/cancel")
		})
	}
}

// BenchmarkFleetTakeover measures, with a 400 ms lease and a 20 ms
// heartbeat, the time from a host's last heartbeat to its running task
// showing interrupted (host_lost) in the store, swept by another host. The
// floor is the lease itself; the median is reported as ms/takeover.
func BenchmarkFleetTakeover(b *testing.B) {
	for _, driver := range []string{"sqlite", "postgres"} {
		b.Run(driver, func(b *testing.B) { benchTakeover(b, driver) })
	}
}

func benchTakeover(b *testing.B, driver string) {
	dir := newSharedStore(b, driver)
	survivor := benchFleetHost(b, dir, "host-b", quick)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		a := benchFleetHost(b, dir, fmt.Sprintf("lost-%d", i), silent)
		started, _ := blockedStep(a.exe)
		task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"bench"}`)})
		if err != nil {
			b.Fatal(err)
		}
		<-started
		hosts, err := survivor.st.ListHosts(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		var last time.Time
		for _, h := range hosts {
			if h.ID == a.st.HostID() {
				last = h.HeartbeatAt
			}
		}
		for {
			l, err := survivor.st.TaskLease(context.Background(), alice, task.ID)
			if err != nil {
				b.Fatal(err)
			}
			if l.Status == store.StatusInterrupted {
				break
			}
			time.Sleep(time.Millisecond) // a benchmark's polling resolution, not a synchronisation
		}
		lat = append(lat, time.Since(last))
	}
	b.ReportMetric(median(lat).Seconds()*1000, "ms/takeover")
	b.ReportMetric(quick.Lease.Seconds()*1000, "ms-lease")
}

// benchFleetHost is newFleetHost whose launcher hands out a fresh fake
// executor (with exe's StepF) per run, as a real one starts a process.
func benchFleetHost(b *testing.B, dir sharedStore, id string, fs FleetSettings) *fleetHost {
	h := newFleetHost(b, dir, id, fs)
	h.l.LaunchF = func(context.Context, string, plugin.Services) (plugin.Executor, error) {
		e := newFakeExecutor()
		e.StepF = h.exe.StepF
		return e, nil
	}
	return h
}
