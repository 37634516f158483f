package integration

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
)

// TestFleetStoreOutage: three real hosts (lease 3 s, heartbeat 1 s), each
// running a task of its own, on a PostgreSQL cluster of the test's own,
// which it stops for longer than the lease (5 s) and starts again. Every
// host could not heartbeat for a lease, so each fenced itself — its log
// says so at ERROR — and, once the store was back, ended its own stopped
// run (host_lost, "could not reach the store"): no host swept another's.
// Then each host runs a new task for two leases more: none is swept, for
// every host waits a lease of unbroken heartbeats before it sweeps, and by
// then every live host's heartbeat is fresh again.
//
// Serial: it times fencing against a 3 s lease, which other tests' load would
// blur.
func TestFleetStoreOutage(t *testing.T) {
	const lease = 3 * time.Second
	pg := testpg.Private(t)
	dsn := pg.DSN(t, "taskhost")
	ids := []string{"host-a", "host-b", "host-c"}
	work, hs := startFleetOn(t, dsn, "", ids...)
	long := map[string]any{"goal": "outlive the outage", "testexec": map[string]any{"steps": 1, "sleep_ms": 120000}}
	before := make([]string, len(hs))
	for i, d := range hs {
		before[i] = createTask(t, d, work, long)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	running := func(ids []string) int {
		n := 0
		for _, id := range ids {
			var st string
			if err := db.QueryRow(`SELECT a.status FROM attempts a WHERE a.task_id = $1 ORDER BY number DESC LIMIT 1`, id).Scan(&st); err == nil && st == "running" {
				n++
			}
		}
		return n
	}
	testwait.Until(t, 20*time.Second, "every host's step to run", func() bool { return running(before) == len(before) })

	pg.Stop(t)
	down := time.Now()
	// Each host fences itself within the lease; one that does not is
	// reported, and the outage goes on, to show what it then does.
	var unfenced []string
	for deadline := down.Add(2 * lease); ; <-time.After(50 * time.Millisecond) {
		unfenced = nil
		for i, d := range hs {
			if !strings.Contains(d.logText(), "host fenced itself") {
				unfenced = append(unfenced, ids[i])
			}
		}
		if len(unfenced) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(unfenced) > 0 {
		t.Errorf("%v did not fence themselves within two leases of the outage", unfenced)
	}
	fenced := time.Since(down)
	// The outage lasts longer than the lease, in all: a span of time, not
	// a condition to wait for.
	<-time.After(time.Until(down.Add(lease + 2*time.Second)))
	pg.Start(t)
	t.Logf("fencing done (or given up) %s into the outage (lease %s); the store was down %s", fenced.Round(time.Millisecond), lease, time.Since(down).Round(time.Millisecond))

	testwait.Until(t, 30*time.Second, "every host to end its own stopped run", func() bool {
		for _, id := range before {
			var st string
			if err := db.QueryRow(`SELECT status FROM tasks WHERE id = $1`, id).Scan(&st); err != nil || st != "interrupted" {
				return false
			}
		}
		return true
	})
	for i, id := range before {
		var reason, msg, host string
		if err := db.QueryRow(`SELECT reason, message, lease_host FROM tasks WHERE id = $1`, id).Scan(&reason, &msg, &host); err != nil {
			t.Fatal(err)
		}
		if reason != "host_lost" || !strings.Contains(msg, ids[i]+" could not reach the store") {
			t.Errorf("task of %s ended %s %q: want host_lost, ended by its own host", ids[i], reason, msg)
		}
	}

	// New live tasks, one per host, through two leases: none is swept.
	after := make([]string, len(hs))
	for i, d := range hs {
		after[i] = createTask(t, d, work, long)
	}
	testwait.Until(t, 20*time.Second, "the new steps to run", func() bool { return running(after) == len(after) })
	// A condition that must hold throughout two leases, sampled.
	watched := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for time.Since(watched) < 2*lease {
		if n := running(after); n != len(after) {
			t.Fatalf("%d of %d live tasks still running %s after the outage ended", n, len(after), time.Since(watched))
		}
		<-tick.C
	}
	var swept int
	if err := db.QueryRow(`SELECT count(*) FROM tasks WHERE reason = 'host_lost' AND message LIKE '%missed its heartbeats%'`).Scan(&swept); err != nil {
		t.Fatal(err)
	}
	if swept != 0 {
		t.Errorf("%d tasks swept by another host", swept)
	}
	for i, d := range hs {
		if log := d.logText(); strings.Contains(log, "tasks of a lost host interrupted") {
			t.Errorf("%s swept another host's tasks:\n%s", ids[i], log)
		}
	}
}
