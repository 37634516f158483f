package main

import (
	"strings"
	"testing"
)

func TestWriteHosts(t *testing.T) {
	self := hostView{ID: "h-a", Version: "0.1.0", StartedAt: "2026-01-02T03:04:05Z", HeartbeatAgeMs: 1234, TasksOwned: 3, State: "live", Self: true}
	other := hostView{ID: "h-b", Version: "0.0.9", StartedAt: "2026-01-02T03:04:05Z", HeartbeatAgeMs: 31000, TasksOwned: 1, State: "lost"}
	live := other
	live.State, live.HeartbeatAgeMs = "live", 850
	for _, tc := range []struct {
		name   string
		v      hostsView
		want   []string
		absent []string
	}{
		{name: "a fleet with a lost host", v: hostsView{Self: "h-a", LeaseMs: 30000, Shared: true, Hosts: []hostView{self, other}},
			want: []string{"HOST", "h-a", "live (this host)", "1.2s ago", "h-b", "0.0.9", "lost", "31s ago",
				"1 lost: no heartbeat for over the lease (30s)", "host_lost"},
			absent: []string{"lost (this host)", "all live", "SQLite"}},
		{name: "all live", v: hostsView{Self: "h-a", LeaseMs: 30000, Shared: true, Hosts: []hostView{self, live}},
			want: []string{"850ms ago", "all live: every heartbeat is within the lease (30s)"}, absent: []string{"lost"}},
		{name: "a lone SQLite host", v: hostsView{Self: "h-a", LeaseMs: 30000, Hosts: []hostView{self}},
			want: []string{"live (this host)", "one host alone: its store is SQLite"}, absent: []string{"all live"}},
		{name: "no host registered", v: hostsView{LeaseMs: 30000, Shared: true},
			want: []string{"HOST", "no host has registered"}},
		{name: "a cut list", v: hostsView{Self: "h-a", LeaseMs: 3000, Shared: true, Truncated: true, Hosts: []hostView{self}},
			want: []string{"only the first 1 hosts by id are listed", "3s"}},
		{name: "an age past a minute", v: hostsView{Self: "h-a", LeaseMs: 30000, Shared: true, Hosts: []hostView{{ID: "h-c", State: "lost", HeartbeatAgeMs: 125400}}},
			want: []string{"2m5s ago"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			writeHosts(&b, tc.v)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(b.String(), a) {
					t.Errorf("output has %q:\n%s", a, b.String())
				}
			}
		})
	}
}

// task status shows the host of the task's run in text as in JSON.
func TestTaskStatusShowsHost(t *testing.T) {
	sock := startFakeAPI(t)
	out, errOut, code := runCLI(t, "", "task", "status", "t_aaaaaaaaaaaaaaaaaaaaaaaaaa", "--socket", sock)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "\nhost      h-0123456789abcdef\n") {
		t.Fatalf("no host line:\n%s", out)
	}
}
