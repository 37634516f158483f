package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// statusView is `taskhost status --json`.
type statusView struct {
	Up         bool               `json:"up"`
	Target     string             `json:"target"`
	Error      string             `json:"error,omitempty"`
	Version    string             `json:"version,omitempty"`
	APIVersion string             `json:"api_version,omitempty"`
	Principal  string             `json:"principal,omitempty"`
	Store      string             `json:"store,omitempty"` // ok | degraded
	Executors  []executorState    `json:"executors,omitempty"`
	Model      *modelView         `json:"model,omitempty"`
	Tasks      map[string]int64   `json:"tasks,omitempty"`
	Counts     *statusCountsScope `json:"counts,omitempty"`
}

type executorState struct {
	Kind    string `json:"kind"`
	Default bool   `json:"default,omitempty"`
	State   string `json:"state"` // ok | unavailable
	Check   string `json:"check,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// statusCountsScope says whose tasks the counts are.
type statusCountsScope struct {
	AllPrincipals bool `json:"all_principals"`
}

// statusOrder is the order the task counts are shown in: live first.
var statusOrder = []string{"pending", "running", "waiting_approval", "blocked", "interrupted", "completed", "failed", "cancelled"}

func statusCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	all := fs.Bool("all", false, "count every principal's tasks (admins only: [api] admins)")
	fs.Usage = usageFunc(fs, "taskhost status [--all] [flags]",
		"Says whether the daemon is up: its version, the store's state, the executors\nand the model preflight, and your task counts by status.\nExit 0: up and healthy; 1: up, but the store does not answer or refuses writes\n(degraded) or the daemon is stopping; 5: no daemon answers; 7: the daemon refuses you.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	conn, err := cf.dial()
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	v := statusView{Target: cf.target()}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	info, err := apipb.NewHostServiceClient(conn).GetInfo(cctx, &apipb.GetInfoRequest{})
	if err != nil {
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded {
			return cf.fail(e, err) // there, but refusing (7) or broken
		}
		v.Error = status.Convert(err).Message()
		if cf.json {
			newPrinter(e, true).emit(v)
		} else {
			fmt.Fprintf(e.stdout, "daemon     down: no taskhost daemon answers on %s (%s)\n", v.Target, v.Error)
		}
		return exitUnavailable
	}
	v.Up, v.Version, v.APIVersion, v.Principal = true, info.Version, info.ApiVersion, info.Principal
	if err := v.fill(cctx, conn, *all); err != nil {
		return cf.fail(e, err)
	}
	v.Counts = &statusCountsScope{AllPrincipals: *all}
	code := exitOK
	if v.Store != "ok" {
		code = exitFailed
	}
	if cf.json {
		newPrinter(e, true).emit(v)
		return code
	}
	v.print(e.stdout, *all)
	return code
}

// fill asks the daemon on conn for the store's health, the executors, the
// model preflight and the task counts (every principal's with all).
func (v *statusView) fill(ctx context.Context, conn grpc.ClientConnInterface, all bool) error {
	v.Store = "ok"
	if hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		v.Store = "degraded"
	}
	execs, err := apipb.NewHostServiceClient(conn).ListExecutors(ctx, &apipb.ListExecutorsRequest{})
	if err != nil {
		return err
	}
	for _, x := range execs.Executors {
		s := executorState{Kind: x.Kind, Default: x.Default, State: "ok"}
		if !x.Available {
			s.State, s.Check, s.Detail = "unavailable", x.UnavailableCheck, x.UnavailableDetail
		}
		v.Executors = append(v.Executors, s)
	}
	if execs.Model != nil {
		m := modelJSON(execs.Model)
		v.Model = &m
	}
	tc := apipb.NewTaskServiceClient(conn)
	v.Tasks = map[string]int64{}
	for _, s := range statusOrder {
		resp, err := tc.ListTasks(ctx, &apipb.ListTasksRequest{Status: []string{s}, PageSize: 1, All: all})
		if err != nil {
			return err
		}
		v.Tasks[s] = resp.Total
	}
	return nil
}

// print writes v as the status table.
func (v statusView) print(w io.Writer, all bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "daemon\tup: taskhost %s (API %s) on %s, you are %s\n", v.Version, v.APIVersion, v.Target, v.Principal)
	store := "ok"
	if v.Store != "ok" {
		store = "degraded: the store does not answer a read or refuses writes (e.g. a full disk), or the daemon is stopping (see its log)"
	}
	fmt.Fprintf(tw, "store\t%s\n", store)
	for i, x := range v.Executors {
		label := ""
		if i == 0 {
			label = "executors"
		}
		kind := x.Kind
		if x.Default {
			kind += " (default)"
		}
		state := x.State
		if x.State != "ok" {
			state += " (" + x.Check + "): " + truncateLine(x.Detail, 80)
		}
		fmt.Fprintf(tw, "%s\t%s: %s\n", label, kind, state)
	}
	if v.Model != nil {
		fmt.Fprintf(tw, "model\t%s\n", strings.TrimPrefix(modelLine(*v.Model), "model: "))
	}
	var counts []string
	for _, s := range statusOrder {
		counts = append(counts, fmt.Sprintf("%s %d", s, v.Tasks[s]))
	}
	whose := "yours"
	if all {
		whose = "all principals'"
	}
	fmt.Fprintf(tw, "tasks\t%s (%s)\n", strings.Join(counts, ", "), whose)
	tw.Flush()
}
