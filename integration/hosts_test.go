package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// The shapes of `taskhost hosts --json` (docs/cli.md).
type (
	hostJSON struct {
		ID             string `json:"id"`
		Version        string `json:"version"`
		StartedAt      string `json:"started_at"`
		HeartbeatAt    string `json:"heartbeat_at"`
		HeartbeatAgeMs int64  `json:"heartbeat_age_ms"`
		TasksOwned     int64  `json:"tasks_owned"`
		State          string `json:"state"`
		Self           bool   `json:"self"`
	}
	hostsJSON struct {
		Self      string     `json:"self"`
		LeaseMs   int64      `json:"lease_ms"`
		Shared    bool       `json:"shared"`
		Truncated bool       `json:"truncated"`
		Hosts     []hostJSON `json:"hosts"`
	}
)

func hostsOf(t *testing.T, d *daemon) (hostsJSON, map[string]hostJSON) {
	t.Helper()
	var v hostsJSON
	d.cliJSON(t, &v, "hosts")
	by := map[string]hostJSON{}
	for _, h := range v.Hosts {
		by[h.ID] = h
	}
	return v, by
}

// Two real hosts on one PostgreSQL database: each lists both, itself
// marked, with the task each owns; task status names the owner through
// either host. Once A is killed, B shows it lost past the lease and, after
// its sweep, owning nothing.
func TestFleetHostsView(t *testing.T) {
	t.Parallel()
	work, hs := startFleet(t, "", "host-a", "host-b")
	a, b := hs[0], hs[1]
	id := createTask(t, a, work, map[string]any{"goal": "sleep on A", "testexec": map[string]any{"sleep_ms": 60000}})
	testwait.Until(t, 20*time.Second, "the step to run on A", func() bool {
		st := status(t, b, id)
		return len(st.Attempts) == 1 && st.Attempts[0].Status == "running"
	})
	for _, d := range []*daemon{a, b} {
		if got := status(t, d, id).Task.Host; got != "host-a" {
			t.Fatalf("task status through %s: host %q, want host-a", d.dataDir, got)
		}
	}

	v, by := hostsOf(t, b)
	if v.Self != "host-b" || v.LeaseMs != 3000 || !v.Shared || v.Truncated || len(v.Hosts) != 2 {
		t.Fatalf("hosts through B: %+v", v)
	}
	ha, hb := by["host-a"], by["host-b"]
	if ha.State != "live" || ha.Self || ha.TasksOwned != 1 || ha.HeartbeatAgeMs > v.LeaseMs || ha.Version == "" || ha.StartedAt == "" || ha.HeartbeatAt == "" {
		t.Errorf("A through B: %+v", ha)
	}
	if hb.State != "live" || !hb.Self || hb.TasksOwned != 0 {
		t.Errorf("B through B: %+v", hb)
	}
	if v, by := hostsOf(t, a); v.Self != "host-a" || !by["host-a"].Self || by["host-b"].Self {
		t.Errorf("hosts through A: %+v", v)
	}
	out, errOut, code := b.cli(t, "hosts")
	if code != 0 || !strings.Contains(out, "live (this host)") || !strings.Contains(out, "all live") {
		t.Fatalf("hosts (text): exit %d\n%s%s", code, out, errOut)
	}

	a.kill(t)
	testwait.Until(t, 20*time.Second, "B to show A lost and owning nothing", func() bool {
		_, by := hostsOf(t, b)
		return by["host-a"].State == "lost" && by["host-a"].TasksOwned == 0
	})
	v, by = hostsOf(t, b)
	if ha := by["host-a"]; ha.HeartbeatAgeMs <= v.LeaseMs {
		t.Errorf("A lost at heartbeat age %d ms, within the %d ms lease", ha.HeartbeatAgeMs, v.LeaseMs)
	}
	if st := status(t, b, id); st.Task.Status != "interrupted" || st.Task.Reason != "host_lost" || st.Task.Host != "host-a" {
		t.Errorf("A's task after the sweep: %+v", st.Task)
	}
	out, _, _ = b.cli(t, "hosts")
	if !strings.Contains(out, "1 lost") {
		t.Errorf("hosts (text) after A died:\n%s", out)
	}
}

// A lone daemon on SQLite lists itself, live, and says it is alone.
func TestHostsOnSQLite(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, testwait.ShortTempDir(t), "")
	v, _ := hostsOf(t, d)
	if v.Shared || len(v.Hosts) != 1 || v.Hosts[0].ID != v.Self || !v.Hosts[0].Self || v.Hosts[0].State != "live" || v.Hosts[0].TasksOwned != 0 {
		t.Fatalf("hosts on SQLite: %+v", v)
	}
	out, _, code := d.cli(t, "hosts")
	if code != 0 || !strings.Contains(out, "one host alone: its store is SQLite") {
		t.Fatalf("hosts (text): exit %d\n%s", code, out)
	}
}
