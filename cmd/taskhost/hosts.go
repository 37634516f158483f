package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// hostsView is `taskhost hosts --json`.
type hostsView struct {
	Self      string     `json:"self"`
	LeaseMs   int64      `json:"lease_ms"`
	Shared    bool       `json:"shared"`
	Truncated bool       `json:"truncated"`
	Hosts     []hostView `json:"hosts"`
}

// hostView is the stable JSON shape of one host.
type hostView struct {
	ID             string `json:"id"`
	Version        string `json:"version"`
	StartedAt      string `json:"started_at"`
	HeartbeatAt    string `json:"heartbeat_at"`
	HeartbeatAgeMs int64  `json:"heartbeat_age_ms"`
	TasksOwned     int64  `json:"tasks_owned"`
	State          string `json:"state"` // live | lost
	Self           bool   `json:"self"`
}

func hostsJSON(r *apipb.ListHostsResponse) hostsView {
	v := hostsView{Self: r.GetSelf(), LeaseMs: r.GetLeaseMs(), Shared: r.GetShared(), Truncated: r.GetTruncated(), Hosts: []hostView{}}
	for _, h := range r.GetHosts() {
		v.Hosts = append(v.Hosts, hostView{
			ID: h.GetId(), Version: h.GetVersion(), StartedAt: rfc3339(h.GetStartedUnixNano()), HeartbeatAt: rfc3339(h.GetHeartbeatUnixNano()),
			HeartbeatAgeMs: h.GetHeartbeatAgeMs(), TasksOwned: h.GetTasksOwned(), State: h.GetState(), Self: h.GetSelf(),
		})
	}
	return v
}

func hostsCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("hosts", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	fs.Usage = usageFunc(fs, "taskhost hosts [flags]",
		"Lists the hosts sharing the daemon's store, as that daemon sees them: id,\nversion, state (live: heartbeat within the lease; lost: older, and a live\nhost's sweep interrupts its tasks as host_lost), heartbeat age, the tasks it\nowns (running or waiting_approval) and when it started; the daemon answering\nis marked. On SQLite the daemon is alone and lists itself.\nExit 0 whatever the hosts' states; 5: no daemon answers; 7: the daemon refuses you.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	conn, err := cf.dial()
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := apipb.NewHostServiceClient(conn).ListHosts(cctx, &apipb.ListHostsRequest{})
	if status.Code(err) == codes.Unimplemented {
		err = status.Error(codes.Unimplemented, "this daemon does not list its hosts (a taskhost older than the hosts command?): "+status.Convert(err).Message())
	}
	if err != nil {
		return cf.fail(e, err)
	}
	v := hostsJSON(resp)
	if cf.json {
		newPrinter(e, true).emit(v)
		return exitOK
	}
	writeHosts(e.stdout, v)
	return exitOK
}

// writeHosts prints the hosts one per line, then what an operator needs to
// read them: the lease, a lone host, a cut list.
func writeHosts(w io.Writer, v hostsView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tVERSION\tSTATE\tHEARTBEAT\tTASKS\tSTARTED")
	lost := 0
	for _, h := range v.Hosts {
		state := h.State
		if h.State == "lost" {
			lost++
		}
		if h.Self {
			state += " (this host)"
		}
		started := ""
		if t, err := time.Parse(time.RFC3339Nano, h.StartedAt); err == nil {
			started = t.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%d\t%s\n", h.ID, h.Version, state, ageText(h.HeartbeatAgeMs), h.TasksOwned, started)
	}
	tw.Flush()
	lease := ageText(v.LeaseMs)
	switch {
	case len(v.Hosts) == 0:
		fmt.Fprintln(w, "\n(no host has registered in the store)")
	case !v.Shared:
		fmt.Fprintf(w, "\none host alone: its store is SQLite, which no other host shares (lease %s)\n", lease)
	case lost > 0:
		fmt.Fprintf(w, "\n%d lost: no heartbeat for over the lease (%s); a live host's sweep interrupts their tasks (host_lost)\n", lost, lease)
	default:
		fmt.Fprintf(w, "\nall live: every heartbeat is within the lease (%s)\n", lease)
	}
	if v.Truncated {
		fmt.Fprintf(w, "(only the first %d hosts by id are listed)\n", len(v.Hosts))
	}
}

// ageText renders milliseconds as an operator reads an age: 850ms, 1.5s,
// 2m5s, 3h0m0s.
func ageText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
