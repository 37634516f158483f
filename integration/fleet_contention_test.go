package integration

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testpg"
)

// TestFleetContention: three real hosts on one PostgreSQL database (lease
// 3 s, heartbeat 1 s), eight clients each creating tasks through their host
// at once, every task stepping to completion. Under that write contention
// no live host is ever swept (no host_lost at all), no create is refused
// busy, no run is interrupted store_error, and the retried transactions
// the hosts count are at most 0.1% of their commits. The heartbeat age of
// every host, sampled from its own /metrics, is logged as a ratio of the
// lease, with the other figures.
//
// Serial: it bounds heartbeat ages and retries under its own load alone.
func TestFleetContention(t *testing.T) {
	const (
		hosts, clients, perClient = 3, 8, 8
		lease                     = 3 * time.Second
	)
	ids := []string{"host-a", "host-b", "host-c"}[:hosts]
	dsn := testpg.DSN(t)
	work, hs := startFleetOn(t, dsn, "\n[api]\nmetrics_listen = \"127.0.0.1:0\"\n\n[tasks]\nmax_concurrent = 64\n", ids...)
	addrs := make([]string, len(hs))
	for i, d := range hs {
		addrs[i] = "http://" + metricsAddr(t, d) + "/metrics"
	}
	spec := writeSpec(t, work, map[string]any{"goal": "contend", "testexec": map[string]any{"steps": 4, "sleep_ms": 10}})

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// Heartbeat ages of every host, read from the hosts table every 50 ms
	// until the end, as a sweeper would see them.
	var mu sync.Mutex
	var ages []float64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rows, err := db.Query(`SELECT heartbeat_ns FROM hosts`)
			if err != nil {
				continue
			}
			now := time.Now()
			for rows.Next() {
				var ns int64
				if rows.Scan(&ns) == nil {
					mu.Lock()
					ages = append(ages, now.Sub(time.Unix(0, ns)).Seconds())
					mu.Unlock()
				}
			}
			rows.Close()
		}
	})

	var refusedBusy, refused int
	var created []string
	var wg sync.WaitGroup
	t0 := time.Now()
	for h, d := range hs {
		for c := range clients {
			wg.Go(func() {
				for k := range perClient {
					out, errOut, code := d.cli(t, "task", "create", "--executor", "testexec", "--spec-file", spec, "--json")
					mu.Lock()
					if code != 0 {
						refused++
						if strings.Contains(errOut, "unavailable: busy") {
							refusedBusy++
						}
						t.Errorf("host %d client %d create %d: exit %d: %s", h, c, k, code, errOut)
						mu.Unlock()
						continue
					}
					var v oneTask
					if err := json.Unmarshal([]byte(out), &v); err != nil || v.Task.ID == "" {
						t.Errorf("create output %q: %v", out, err)
					} else {
						created = append(created, v.Task.ID)
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	createdIn := time.Since(t0)

	// Every task ends; one that does not by the deadline is reported with
	// the other figures, not in place of them.
	var live int
	for deadline := time.Now().Add(60 * time.Second); ; {
		if err := db.QueryRow(`SELECT count(*) FROM tasks WHERE status NOT IN ('completed', 'failed', 'cancelled', 'interrupted')`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live == 0 || time.Now().After(deadline) {
			break
		}
		<-time.After(100 * time.Millisecond)
	}
	close(stop)
	sampler.Wait()

	byEnd := map[string]int{}
	rows, err := db.Query(`SELECT status, reason, count(*) FROM tasks GROUP BY status, reason`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var st, reason string
		var n int
		if err := rows.Scan(&st, &reason, &n); err != nil {
			t.Fatal(err)
		}
		byEnd[st+"/"+reason] = n
	}
	rows.Close()
	var lostAttempts, storeErrAttempts int
	if err := db.QueryRow(`SELECT count(*) FILTER (WHERE reason = 'host_lost'), count(*) FILTER (WHERE reason = 'store_error') FROM attempts`).
		Scan(&lostAttempts, &storeErrAttempts); err != nil {
		t.Fatal(err)
	}

	var retries, commits float64
	retriesBy := map[string]float64{}
	for _, a := range addrs {
		m, err := scrapeMetrics(a)
		if err != nil {
			t.Fatal(err)
		}
		commits += m["taskhost_store_commit_seconds_count"]
		for k, v := range m {
			if strings.HasPrefix(k, "taskhost_store_retries_total{") {
				retries += v
				retriesBy[k] += v
			}
		}
		if m["taskhost_fleet_sweeps_total"] != 0 {
			t.Errorf("%s swept %v runs of live hosts", a, m["taskhost_fleet_sweeps_total"])
		}
	}

	slices.Sort(ages)
	p99, maxAge := 0.0, 0.0
	if n := len(ages); n > 0 {
		p99, maxAge = ages[min(n-1, n*99/100)], ages[n-1]
	}
	rate := 0.0
	if commits > 0 {
		rate = 100 * retries / commits
	}
	t.Logf("%d hosts × %d clients: %d tasks created in %s, %d refused (%d busy); ends %v; attempts host_lost %d, store_error %d",
		hosts, clients, len(created), createdIn.Round(time.Millisecond), refused, refusedBusy, byEnd, lostAttempts, storeErrAttempts)
	t.Logf("retries %v of %v commits (%.4f%%) %v; heartbeat age over %d samples: p99 %.2f× the lease, max %.2f×",
		retries, commits, rate, retriesBy, len(ages), p99/lease.Seconds(), maxAge/lease.Seconds())

	if live != 0 {
		t.Errorf("%d tasks still live a minute after the last create", live)
	}
	if refusedBusy != 0 || refused != 0 {
		t.Errorf("%d creates refused, %d of them busy: want none", refused, refusedBusy)
	}
	if n := byEnd["completed/"]; n != len(created) {
		t.Errorf("%d of %d tasks completed: %v", n, len(created), byEnd)
	}
	if lostAttempts != 0 || storeErrAttempts != 0 {
		t.Errorf("attempts interrupted host_lost %d, store_error %d: want none", lostAttempts, storeErrAttempts)
	}
	if commits == 0 || rate > 0.1 {
		t.Errorf("retries are %.4f%% of %v commits, want at most 0.1%%", rate, commits)
	}
	if len(ages) == 0 || maxAge >= lease.Seconds()-1 {
		t.Errorf("heartbeat age max %.2fs over %d samples: a host came within a heartbeat of fencing itself", maxAge, len(ages))
	}
	for _, d := range hs {
		if log := d.logText(); strings.Contains(log, "fenced itself") || strings.Contains(log, "tasks of a lost host interrupted") {
			t.Errorf("a live host fenced itself or swept another:\n%s", log)
		}
	}
}

// scrapeMetrics reads one /metrics exposition into its samples, without
// failing the test (it runs off the test's goroutine).
func scrapeMetrics(url string) (map[string]float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			return nil, fmt.Errorf("sample %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, nil
}
