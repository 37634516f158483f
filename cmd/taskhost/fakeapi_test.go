package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/api"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// fakeAPI answers every RPC with fixed data, so the CLI's output can be
// compared with golden files.
type fakeAPI struct {
	apipb.UnimplementedTaskServiceServer
	apipb.UnimplementedApprovalServiceServer
	apipb.UnimplementedHostServiceServer
}

var fixedTime = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC).UnixNano()

func fixedTask(status, reason string) *apipb.Task {
	m := func(u, l int64) *apipb.Meter { return &apipb.Meter{Used: u, Limit: l} }
	t := &apipb.Task{
		Id: "t_aaaaaaaaaaaaaaaaaaaaaaaaaa", Principal: "alice", Executor: "legacy", Status: status, Reason: reason, RunId: 1,
		Budgets:         &apipb.Budgets{Steps: m(3, 20), ToolCalls: m(2, 50), ModelCalls: m(5, 100), Depth: m(0, 1), WallMs: m(2500, 1800000)},
		CreatedUnixNano: fixedTime, UpdatedUnixNano: fixedTime + int64(time.Second),
	}
	if status == "completed" {
		t.Result = []byte(`{"summary":"report ready"}`)
	}
	return t
}

func notFoundErr(what string) error {
	st, _ := status.New(codes.NotFound, what+" not found").WithDetails(&errdetails.ErrorInfo{Reason: api.ReasonNotFound, Domain: api.ErrorDomain})
	return st.Err()
}

func (fakeAPI) CreateTask(_ context.Context, req *apipb.CreateTaskRequest) (*apipb.CreateTaskResponse, error) {
	if req.Executor == "machinespirit" {
		st, _ := status.New(codes.FailedPrecondition, `executor "machinespirit" unavailable (disabled): machinespirit is disabled`).
			WithDetails(&errdetails.ErrorInfo{Reason: api.ReasonExecutorUnavailable, Domain: api.ErrorDomain})
		return nil, st.Err()
	}
	if req.GetLimits().GetMaxSteps() > 200 {
		st, _ := status.New(codes.InvalidArgument, "max_steps: is 500: above the cap of 200").WithDetails(
			&errdetails.ErrorInfo{Reason: api.ReasonInvalidArgument, Domain: api.ErrorDomain},
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "max_steps", Description: "is 500: above the cap of 200"}}})
		return nil, st.Err()
	}
	t := fixedTask("running", "")
	t.Budgets.Steps.Used, t.Budgets.ToolCalls.Used, t.Budgets.ModelCalls.Used, t.Budgets.WallMs.Used = 0, 0, 0, 0
	t.Spec = req.Spec
	return &apipb.CreateTaskResponse{Task: t}, nil
}

func (fakeAPI) GetTask(_ context.Context, req *apipb.GetTaskRequest) (*apipb.GetTaskResponse, error) {
	if req.TaskId != "t_aaaaaaaaaaaaaaaaaaaaaaaaaa" {
		return nil, notFoundErr("task " + req.TaskId)
	}
	t := fixedTask("completed", "")
	t.LeaseHost = "h-0123456789abcdef"
	return &apipb.GetTaskResponse{
		Task: t,
		Attempts: []*apipb.Attempt{
			{Number: 1, RunId: 1, Status: "interrupted", Reason: "executor_crashed", StartedUnixNano: fixedTime, EndedUnixNano: fixedTime + 5e6, ExitCode: -1, ExitSignal: "killed", StderrTail: "panic: x"},
			{Number: 2, RunId: 2, Status: "completed", Outcome: "complete", Summary: "report ready", StartedUnixNano: fixedTime + 1e9, EndedUnixNano: fixedTime + 1e9 + 8e6, ExitCode: -1},
		},
		UnsettledEffects: []*apipb.UnsettledEffect{
			{Attempt: 1, Seq: 2, Status: "indeterminate", Summary: "shell.run", Resolution: "unsettled"},
			{Attempt: 1, Seq: 1, Status: "indeterminate", Summary: "shell.run", Resolution: "retry_authorized", ResolvedBy: "a_cccccccccccccccccccccccccc", ResolvedUnixNano: fixedTime + 1e9},
		},
	}, nil
}

func (fakeAPI) ResolveEffect(_ context.Context, req *apipb.ResolveEffectRequest) (*apipb.ResolveEffectResponse, error) {
	if req.Attempt != 1 || req.Seq != 2 {
		st, _ := status.New(codes.FailedPrecondition, fmt.Sprintf("task %s effect %d/%d is already abandoned by executor", req.TaskId, req.Attempt, req.Seq)).
			WithDetails(&errdetails.ErrorInfo{Reason: api.ReasonTaskConflict, Domain: api.ErrorDomain})
		return nil, st.Err()
	}
	return &apipb.ResolveEffectResponse{Effect: &apipb.UnsettledEffect{Attempt: 1, Seq: 2, Status: "indeterminate", Summary: "shell.run",
		Resolution: req.Resolution, ResolvedBy: "operator:alice", ResolvedUnixNano: fixedTime + 2e9}}, nil
}

func (fakeAPI) ListTasks(context.Context, *apipb.ListTasksRequest) (*apipb.ListTasksResponse, error) {
	a, b := fixedTask("completed", ""), fixedTask("interrupted", "executor_crashed")
	a.Result = nil
	b.Id = "t_bbbbbbbbbbbbbbbbbbbbbbbbbb"
	return &apipb.ListTasksResponse{Tasks: []*apipb.Task{a, b}}, nil
}

func (fakeAPI) CancelTask(_ context.Context, req *apipb.CancelTaskRequest) (*apipb.CancelTaskResponse, error) {
	if req.TaskId != "t_aaaaaaaaaaaaaaaaaaaaaaaaaa" {
		st, _ := status.New(codes.FailedPrecondition, "task "+req.TaskId+" is completed: cannot become cancelled").
			WithDetails(&errdetails.ErrorInfo{Reason: api.ReasonTaskConflict, Domain: api.ErrorDomain})
		return nil, st.Err()
	}
	return &apipb.CancelTaskResponse{Task: fixedTask("cancelled", "user_cancelled")}, nil
}

func (fakeAPI) ResumeTask(context.Context, *apipb.ResumeTaskRequest) (*apipb.ResumeTaskResponse, error) {
	t := fixedTask("running", "")
	t.RunId = 2
	return &apipb.ResumeTaskResponse{Task: t}, nil
}

func (fakeAPI) WatchTask(req *apipb.WatchTaskRequest, s apipb.TaskService_WatchTaskServer) error {
	if req.TaskId != "t_aaaaaaaaaaaaaaaaaaaaaaaaaa" {
		return notFoundErr("task " + req.TaskId)
	}
	send := func(m *apipb.WatchTaskResponse) error { return s.Send(m) }
	if err := send(&apipb.WatchTaskResponse{Item: &apipb.WatchTaskResponse_Snapshot{Snapshot: fixedTask("running", "")}}); err != nil {
		return err
	}
	for i, typ := range []string{"step.started", "step.completed", "task.completed"} {
		ev := &apipb.Event{Seq: int64(10 + i), TaskId: "t_aaaaaaaaaaaaaaaaaaaaaaaaaa", RunId: 1, Type: typ, TimeUnixNano: fixedTime,
			Payload: []byte(`{"task_id":"t_aaaaaaaaaaaaaaaaaaaaaaaaaa","run_id":1,"executor":"legacy","attempt":3,"status":"running","steps":"3/20","tools":"2/50","models":"5/100","wall_s":"2/1800"}`)}
		if err := send(&apipb.WatchTaskResponse{Item: &apipb.WatchTaskResponse_Event{Event: ev}}); err != nil {
			return err
		}
	}
	return send(&apipb.WatchTaskResponse{Item: &apipb.WatchTaskResponse_Final{Final: fixedTask("completed", "")}})
}

func fixedApproval(status string) *apipb.Approval {
	a := &apipb.Approval{Id: "a_cccccccccccccccccccccccccc", TaskId: "t_aaaaaaaaaaaaaaaaaaaaaaaaaa", RunId: 1, Attempt: 2, Tool: "shell.run",
		// The escape stands for a foreign daemon's: the CLI must not print it raw.
		Prompt: "make test\x1b[2K", Status: status, CreatedUnixNano: fixedTime, ExpiresUnixNano: fixedTime + 3600e9}
	if status != "pending" {
		a.ResolvedUnixNano = fixedTime + 2e9
	}
	return a
}

func (fakeAPI) ListApprovals(context.Context, *apipb.ListApprovalsRequest) (*apipb.ListApprovalsResponse, error) {
	return &apipb.ListApprovalsResponse{Approvals: []*apipb.Approval{fixedApproval("pending")}}, nil
}

func (fakeAPI) Approve(context.Context, *apipb.ResolveApprovalRequest) (*apipb.ResolveApprovalResponse, error) {
	return &apipb.ResolveApprovalResponse{Approval: fixedApproval("approved")}, nil
}

func (fakeAPI) Reject(context.Context, *apipb.ResolveApprovalRequest) (*apipb.ResolveApprovalResponse, error) {
	return &apipb.ResolveApprovalResponse{Approval: fixedApproval("rejected")}, nil
}

func (fakeAPI) ListExecutors(context.Context, *apipb.ListExecutorsRequest) (*apipb.ListExecutorsResponse, error) {
	return &apipb.ListExecutorsResponse{Executors: []*apipb.Executor{
		{Kind: "legacy", Available: true, Default: true, Version: "1.0.0", ProtocolVersion: 1, CheckpointSchemas: []string{"legacy/1"},
			Capabilities: []string{"model", "tools"}, Path: "/opt/taskhost/bin/taskhost-executor-legacy",
			Sha256:      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			Confinement: "landlock abi 7, no_new_privs, no capabilities, seccomp, rlimits"},
		{Kind: "machinespirit", Confinement: "none (no Landlock)", UnavailableCheck: "disabled", UnavailableDetail: "machinespirit is disabled: set [machine_spirit] enabled = true in the config to use it"},
	}}, nil
}

func (fakeAPI) ListHosts(context.Context, *apipb.ListHostsRequest) (*apipb.ListHostsResponse, error) {
	return &apipb.ListHostsResponse{Self: "h-0123456789abcdef", LeaseMs: 30000, Shared: true, Hosts: []*apipb.FleetHost{
		{Id: "h-0123456789abcdef", Version: "0.1.0", StartedUnixNano: fixedTime, HeartbeatUnixNano: fixedTime + 3600e9,
			HeartbeatAgeMs: 1200, TasksOwned: 3, State: "live", Self: true},
		{Id: "h-fedcba9876543210", Version: "0.1.0", StartedUnixNano: fixedTime, HeartbeatUnixNano: fixedTime + 3500e9,
			HeartbeatAgeMs: 101200, TasksOwned: 1, State: "lost"},
	}}, nil
}

// startFakeAPI serves fakeAPI on a unix socket and returns its path.
func startFakeAPI(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := fakeAPI{}
	apipb.RegisterTaskServiceServer(srv, f)
	apipb.RegisterApprovalServiceServer(srv, f)
	apipb.RegisterHostServiceServer(srv, f)
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return path
}
