package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

type taskService struct {
	apipb.UnimplementedTaskServiceServer
	s *Server
}

func (ts *taskService) CreateTask(ctx context.Context, req *apipb.CreateTaskRequest) (*apipb.CreateTaskResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if req.Executor != "" && !executorRE.MatchString(req.Executor) {
		return nil, invalid("executor", "must be 1 to 32 characters: a lowercase letter, then lowercase letters, digits, '_' or '-'")
	}
	switch {
	case len(req.Spec) == 0:
		return nil, invalid("spec", `is required: a JSON object with at least a "goal"`)
	case len(req.Spec) > maxSpecBytes:
		return nil, invalid("spec", fmt.Sprintf("is %d bytes, at most %d", len(req.Spec), maxSpecBytes))
	}
	var lim host.Limits
	if l := req.Limits; l != nil {
		lim = host.Limits{Steps: l.MaxSteps, ToolCalls: l.MaxToolCalls, ModelCalls: l.MaxModelCalls, Depth: l.MaxDepth, WallSeconds: l.MaxWallSeconds,
			ModelTokens: l.MaxModelTokens, OutputBytes: l.MaxOutputBytes}
	}
	var files []host.File
	for _, f := range req.GetFiles() {
		files = append(files, host.File{Name: f.GetName(), Data: f.GetData()})
	}
	var t store.Task
	err = ts.s.startWithin(ctx, p, func() error {
		var err error
		t, err = ts.s.opts.Tasks.Create(ctx, p, host.CreateRequest{Executor: req.Executor, Spec: req.Spec, Limits: lim, Files: files})
		return err
	})
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "executor", req.Executor)
	}
	ts.s.log.Info("task created", "principal", p, "task", t.ID, "executor", t.Executor, "status", t.Status)
	resp := &apipb.CreateTaskResponse{Task: taskPB(t, true)}
	if err := ts.s.withQueuePositions(ctx, resp.Task); err != nil {
		return nil, err
	}
	return resp, nil
}

func (ts *taskService) GetTask(ctx context.Context, req *apipb.GetTaskRequest) (*apipb.GetTaskResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("task_id", req.TaskId); err != nil {
		return nil, err
	}
	limit := int(req.AttemptsLimit)
	switch {
	case limit < 0:
		return nil, invalid("attempts_limit", "must not be negative")
	case limit == 0:
		limit = defaultAttempts
	case limit > maxAttempts:
		limit = maxAttempts
	}
	if p, err = ts.s.owner(ctx, p, req.TaskId, ""); err != nil {
		return nil, err
	}
	t, err := ts.s.opts.Tasks.Get(ctx, p, req.TaskId)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
	}
	atts, err := ts.s.opts.Tasks.Attempts(ctx, p, req.TaskId)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
	}
	resp := &apipb.GetTaskResponse{Task: taskPB(t, true)}
	if tr, ok := ts.s.opts.Tasks.(trees); ok {
		tree, err := tr.Tree(ctx, p, req.TaskId)
		if err != nil {
			return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
		}
		if len(tree) > 1 {
			for _, n := range tree {
				resp.Tree = append(resp.Tree, taskPB(n, false))
			}
		}
	}
	if err := ts.s.withQueuePositions(ctx, resp.Task); err != nil {
		return nil, err
	}
	if f := ts.s.opts.Fleet; f != nil {
		if resp.Task.LeaseHost, err = f.TaskHost(ctx, p, req.TaskId); err != nil {
			return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
		}
	}
	if len(atts) > limit {
		resp.AttemptsOmitted = int64(len(atts) - limit)
		atts = atts[len(atts)-limit:]
	}
	var byAttempt map[int64]store.ModelUsage
	if mu, ok := ts.s.opts.Tasks.(modelUsages); ok {
		var total store.ModelUsage
		if total, byAttempt, err = mu.TaskModelUsage(ctx, p, req.TaskId); err != nil {
			return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
		}
		resp.Task.ModelUsage = usagePB(total)
	}
	for _, a := range atts {
		pa := attemptPB(a)
		if u, ok := byAttempt[a.Number]; ok {
			pa.ModelUsage = usagePB(u)
		}
		resp.Attempts = append(resp.Attempts, pa)
	}
	if resp.UnsettledEffects, err = ts.unsettledEffects(ctx, p, req.TaskId); err != nil {
		return nil, err
	}
	return resp, nil
}

func (ts *taskService) ListTasks(ctx context.Context, req *apipb.ListTasksRequest) (*apipb.ListTasksResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	size := int(req.PageSize)
	switch {
	case size < 0:
		return nil, invalid("page_size", "must not be negative")
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	if len(req.Status) > maxStatusFilters {
		return nil, invalid("status", fmt.Sprintf("has %d entries, at most %d", len(req.Status), maxStatusFilters))
	}
	q := store.ListQuery{Limit: size + 1} // one more, to know whether a next page exists
	if req.All {
		if !ts.s.isAdmin(p) {
			return nil, errNotAdmin()
		}
		q.AllPrincipals = true
	}
	for i, s := range req.Status {
		st, ok := taskStatuses[s]
		if !ok {
			return nil, invalid(fmt.Sprintf("status[%d]", i), fmt.Sprintf("%q is not a task status: use pending, running, waiting_approval, blocked, completed, failed, cancelled or interrupted", text.Clip(s, 40)))
		}
		q.Status = append(q.Status, st)
	}
	var ok bool
	if q.Order, ok = listOrders[req.Sort]; !ok {
		return nil, invalid("sort", fmt.Sprintf("%q is not an order: use created, -created or status", text.Clip(req.Sort, 40)))
	}
	if len(req.Executor) > store.MaxExecutorBytes {
		return nil, invalid("executor", fmt.Sprintf("is %d bytes, at most %d", len(req.Executor), store.MaxExecutorBytes))
	}
	q.Executor = req.Executor
	switch {
	case req.SinceUnixNano < 0:
		return nil, invalid("since_unix_nano", fmt.Sprintf("is %d, must not be negative", req.SinceUnixNano))
	case req.SinceUnixNano > 0:
		q.Since = time.Unix(0, req.SinceUnixNano)
	}
	scope := listScope(req)
	cur, err := ts.s.pages.open(p, scope, req.PageToken)
	if err != nil {
		return nil, err
	}
	q.AfterSeq, q.AfterStatus = cur.seq, cur.status
	tasks, err := ts.s.opts.Tasks.List(ctx, p, q)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", "")
	}
	resp := &apipb.ListTasksResponse{}
	if resp.Total, err = ts.s.opts.Tasks.Count(ctx, p, q); err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", "")
	}
	if len(tasks) > size {
		tasks = tasks[:size]
		last := tasks[size-1]
		resp.NextPageToken = ts.s.pages.seal(p, scope, cursor{seq: last.Seq, status: last.Status})
	}
	for _, t := range tasks {
		resp.Tasks = append(resp.Tasks, taskPB(t, false))
	}
	if err := ts.s.withQueuePositions(ctx, resp.Tasks...); err != nil {
		return nil, err
	}
	return resp, nil
}

// listOrders are the ListTasks sort values; "" keeps the API's first order,
// oldest first, for the clients written before there was a choice.
var listOrders = map[string]store.ListOrder{
	"": store.OrderCreated, "created": store.OrderCreated, "-created": store.OrderNewest, "status": store.OrderStatus,
}

// listScope names a listing's order and filters, to which its page tokens
// are bound.
func listScope(req *apipb.ListTasksRequest) string {
	return fmt.Sprintf("%d|%s|%d|%d|%s", listOrders[req.Sort], req.Executor, req.SinceUnixNano, boolInt(req.All), strings.Join(req.Status, ","))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (ts *taskService) CancelTask(ctx context.Context, req *apipb.CancelTaskRequest) (*apipb.CancelTaskResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("task_id", req.TaskId); err != nil {
		return nil, err
	}
	caller := p
	if p, err = ts.s.owner(ctx, p, req.TaskId, "cancel"); err != nil {
		return nil, err
	}
	t, err := ts.s.opts.Tasks.Cancel(ctx, p, req.TaskId)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
	}
	ts.s.log.Info("task cancelled", "principal", p, "by", caller, "task", t.ID)
	return &apipb.CancelTaskResponse{Task: taskPB(t, true)}, nil
}

func (ts *taskService) ResumeTask(ctx context.Context, req *apipb.ResumeTaskRequest) (*apipb.ResumeTaskResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("task_id", req.TaskId); err != nil {
		return nil, err
	}
	caller := p
	if p, err = ts.s.owner(ctx, p, req.TaskId, "resume"); err != nil {
		return nil, err
	}
	var t store.Task
	err = ts.s.startWithin(ctx, p, func() error {
		var err error
		t, err = ts.s.opts.Tasks.Resume(ctx, p, req.TaskId)
		return err
	})
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
	}
	ts.s.log.Info("task resumed", "principal", p, "by", caller, "task", t.ID, "run", t.RunID)
	resp := &apipb.ResumeTaskResponse{Task: taskPB(t, true)}
	if err := ts.s.withQueuePositions(ctx, resp.Task); err != nil {
		return nil, err
	}
	return resp, nil
}
