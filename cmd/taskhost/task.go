package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

func taskCommands() []command {
	return []command{
		{"create", "create a task and start it", taskCreateCmd},
		{"list", "list your tasks", taskListCmd},
		{"status", "show a task: budgets, reason, attempt log", taskStatusCmd},
		{"cancel", "cancel a task (or --all)", taskCancelCmd},
		{"resume", "resume an interrupted task (or --all)", taskResumeCmd},
		{"pause", "pause a task (or --all): interrupted, user_pause, until resumed", taskPauseCmd},
		{"watch", "stream a task's events until it stops running", taskWatchCmd},
		{"files", "list a task's workspace, or write one of its files out", taskFilesCmd},
		{"cp", "copy a file out of a task's workspace: ID:PATH DEST", taskCpCmd},
		{"delete", "delete a finished task: its records and workspace", taskDeleteCmd},
		{"resolve-effect", "authorize or abandon a tool call that may already have run once", taskResolveEffectCmd},
	}
}

func taskCmd(ctx context.Context, e *env, args []string) int {
	return subcommand(e, "task", taskCommands(), args, func(c command, rest []string) int { return c.run(ctx, e, rest) })
}

// tasks dials the daemon and returns its task service and a func that
// closes the connection.
func (c *clientFlags) tasks() (apipb.TaskServiceClient, func(), error) {
	conn, err := c.dial()
	if err != nil {
		return nil, nil, err
	}
	return apipb.NewTaskServiceClient(conn), func() { conn.Close() }, nil
}

func taskCreateCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task create", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	executor := fs.String("executor", "", "executor kind (default: the daemon's tasks.executor)")
	goal := fs.String("goal", "", "the task's goal (sets spec.goal)")
	specFile := fs.String("spec-file", "", "JSON task spec file: goal and executor options")
	var lim apipb.Limits
	fs.Int64Var(&lim.MaxSteps, "max-steps", 0, "step budget (default: the daemon's tasks.max_steps)")
	fs.Int64Var(&lim.MaxToolCalls, "max-tool-calls", 0, "tool-call budget (default: tasks.max_tool_calls)")
	fs.Int64Var(&lim.MaxModelCalls, "max-model-calls", 0, "model-call budget (default: tasks.max_model_calls)")
	fs.Int64Var(&lim.MaxDepth, "max-depth", 0, "recursion depth budget (default: tasks.max_depth)")
	fs.Int64Var(&lim.MaxWallSeconds, "max-wall-seconds", 0, "active wall-clock budget in seconds (default: tasks.max_wall_seconds)")
	fs.Int64Var(&lim.MaxModelTokens, "max-model-tokens", 0, "model-token budget, prompt + completion (default: tasks.max_model_tokens)")
	fs.Int64Var(&lim.MaxOutputBytes, "max-output-bytes", 0, "budget of bytes handed back by model and tool calls (default: tasks.max_output_bytes)")
	watch := fs.Bool("watch", false, "then watch it until it stops running (as 'task watch')")
	noProgress := fs.Bool("no-progress", false, "with --watch: no live progress line, even on a terminal")
	var files fileFlags
	fs.Var(&files, "file", "copy a file into the task's workspace before its first step: PATH or PATH=NAME (repeatable)")
	fs.Usage = usageFunc(fs, "taskhost task create --goal TEXT [--executor NAME] [--spec-file FILE] [--max-steps N] [--watch] [flags]",
		"Creates a task for you in the running daemon and starts it. Prints its id;\nwith --watch, follows it like 'task watch'.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if *goal == "" && *specFile == "" {
		errorf(e, "task create: give --goal TEXT or --spec-file FILE")
		fs.Usage()
		return exitUsage
	}
	for _, v := range []struct {
		name string
		v    int64
	}{{"max-steps", lim.MaxSteps}, {"max-tool-calls", lim.MaxToolCalls}, {"max-model-calls", lim.MaxModelCalls}, {"max-depth", lim.MaxDepth}, {"max-wall-seconds", lim.MaxWallSeconds},
		{"max-model-tokens", lim.MaxModelTokens}, {"max-output-bytes", lim.MaxOutputBytes}} {
		if v.v < 0 {
			return cf.fail(e, usageError(fmt.Sprintf("task create: --%s must not be negative", v.name)))
		}
	}
	spec, err := buildSpec(*goal, *specFile)
	if err != nil {
		return cf.fail(e, usageError("task create: "+err.Error()))
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	req := &apipb.CreateTaskRequest{Executor: *executor, Spec: spec, Limits: &lim}
	for _, f := range files.files {
		req.Files = append(req.Files, &apipb.WorkspaceFile{Name: f.Name, Data: f.Data})
	}
	resp, err := tc.CreateTask(cctx, req)
	cancel()
	if err != nil {
		return cf.fail(e, err)
	}
	t := resp.Task
	if *watch {
		if !cf.json {
			fmt.Fprintf(e.stderr, "created task %s (executor %s)\n", t.Id, t.Executor)
		}
		return watchTask(ctx, e, &cf, tc, t.Id, watchOptions{noProgress: *noProgress})
	}
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"task": taskJSON(t)})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "%s\n", t.Id)
	fmt.Fprintf(e.stderr, "created task %s (executor %s, %s); follow it with: taskhost task watch %s\n", t.Id, t.Executor, t.Status, t.Id)
	return exitOK
}

func taskListCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task list", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	statuses := fs.String("status", "", "only tasks in these statuses, comma-separated (pending, running, waiting_approval, blocked, completed, failed, cancelled, interrupted)")
	limit := fs.Int("limit", 1000, "list at most this many tasks (1..100000)")
	sortBy := fs.String("sort", "-created", "the order: -created (newest first), created (oldest first) or status (by status, newest first within one)")
	executor := fs.String("executor", "", "only tasks of this executor kind")
	since := fs.String("since", "", "only tasks created since then: a duration back from now (24h, 90m) or an RFC 3339 time")
	allPrincipals := fs.Bool("all", false, "every principal's tasks, with a PRINCIPAL column (admins only: [api] admins)")
	fs.Usage = usageFunc(fs, "taskhost task list [--status S[,S...]] [--executor KIND] [--since D|TIME] [--sort ORDER] [--limit N] [--all] [flags]",
		"Lists your tasks, newest first (--sort to change), at most --limit of them;\na cut list says how many it shows of how many match.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if *limit < 1 || *limit > 100000 {
		return cf.fail(e, usageError("task list: --limit must be 1..100000"))
	}
	switch *sortBy {
	case "created", "-created", "status":
	default:
		return cf.fail(e, usageError(fmt.Sprintf("task list: --sort %q: use -created, created or status", truncateLine(*sortBy, 40))))
	}
	sinceNano, err := parseSince(*since, time.Now())
	if err != nil {
		return cf.fail(e, usageError("task list: --since: "+err.Error()))
	}
	var filter []string
	if *statuses != "" {
		for _, s := range strings.Split(*statuses, ",") {
			filter = append(filter, strings.TrimSpace(s))
		}
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	all, total, err := listTasks(ctx, tc, &apipb.ListTasksRequest{Status: filter,
		All: *allPrincipals, Sort: *sortBy, Executor: *executor, SinceUnixNano: sinceNano}, *limit)
	if err != nil {
		return cf.fail(e, err)
	}
	if cf.json {
		newPrinter(e, true).emit(taskListJSON(all, total, *sortBy))
		return exitOK
	}
	omitted := total - int64(len(all))
	if len(all) == 0 {
		fmt.Fprintln(e.stderr, "no tasks (create one with: taskhost task create --goal TEXT)")
		return exitOK
	}
	if *allPrincipals {
		writePrincipalTaskTable(e.stdout, all)
	} else {
		writeTaskTable(e.stdout, all)
	}
	if omitted > 0 {
		fmt.Fprintf(e.stderr, "showing %d of %d tasks (--sort %s); %d are not shown (--limit %d shows them all)\n", len(all), total, *sortBy, omitted, total)
	}
	return exitOK
}

// listTasks reads pages of req until it has limit tasks; the first page's
// total says how many match. The daemon sorts and filters.
func listTasks(ctx context.Context, tc apipb.TaskServiceClient, req *apipb.ListTasksRequest, limit int) (all []*apipb.Task, total int64, err error) {
	total = -1
	for len(all) < limit {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		req.PageSize = int32(min(500, limit-len(all)))
		resp, err := tc.ListTasks(cctx, req)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		all = append(all, resp.Tasks...)
		if total < 0 {
			total = resp.Total
		}
		if req.PageToken = resp.NextPageToken; req.PageToken == "" {
			break
		}
	}
	all = all[:min(len(all), limit)]
	return all, max(total, int64(len(all))), nil
}

// taskListJSON is the --json shape of `task list`.
func taskListJSON(all []*apipb.Task, total int64, sortBy string) map[string]any {
	views := make([]taskView, 0, len(all))
	for _, t := range all {
		v := taskJSON(t)
		v.QueuePosition = t.GetQueuePosition()
		views = append(views, v)
	}
	out := map[string]any{"tasks": views, "shown": len(all), "total": total, "sort": sortBy}
	if omitted := total - int64(len(all)); omitted > 0 {
		out["omitted"] = omitted
	}
	return out
}

// maxSince bounds --since as a duration: a century back is every task.
const maxSince = 100 * 365 * 24 * time.Hour

// parseSince reads --since: "" (no filter, 0), a positive Go duration back
// from now, or an RFC 3339 time; it returns Unix nanoseconds.
func parseSince(v string, now time.Time) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 || d > maxSince {
			return 0, fmt.Errorf("%s: a duration must be positive and at most %s", v, maxSince)
		}
		return now.Add(-d).UnixNano(), nil
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a duration (24h, 90m) nor an RFC 3339 time (2026-01-02T15:04:05Z)", truncateLine(v, 64))
	}
	if at.UnixNano() <= 0 {
		return 0, fmt.Errorf("%s is before 1970", v)
	}
	return at.UnixNano(), nil
}

func taskStatusCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task status", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	attempts := fs.Int("attempts", 50, "show this many of the most recent attempts (1..500)")
	full := fs.Bool("full", false, "show each attempt's whole summary and message, and what its model calls cost, below the table")
	fs.Usage = usageFunc(fs, "taskhost task status ID [flags]", "Shows a task: status and reason, budgets as used/limit meters, what its model\ncalls cost, and its attempt log (--full: each attempt's whole summary).")
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	if *attempts < 1 || *attempts > 500 {
		return cf.fail(e, usageError("task status: --attempts must be 1..500"))
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := tc.GetTask(cctx, &apipb.GetTaskRequest{TaskId: pos[0], AttemptsLimit: int32(*attempts)})
	if err != nil {
		return cf.fail(e, err)
	}
	if cf.json {
		newPrinter(e, true).emit(taskStatusJSON(resp))
		return exitOK
	}
	t := resp.Task
	writeTaskDetail(e.stdout, t, resp.Attempts, resp.AttemptsOmitted)
	if *full {
		for _, a := range resp.Attempts {
			writeAttemptFull(e.stdout, a)
		}
	}
	writeUnsettled(e.stdout, t.GetId(), resp.UnsettledEffects)
	writeTree(e.stdout, t.GetId(), resp.Tree)
	if t.GetStatus() == string(store.StatusInterrupted) {
		fmt.Fprintf(e.stdout, "\nresume it with: taskhost task resume %s\n", t.GetId())
	}
	return exitOK
}

// taskStatusJSON is the --json shape of `task status`.
func taskStatusJSON(resp *apipb.GetTaskResponse) map[string]any {
	views := make([]attemptView, 0, len(resp.Attempts))
	for _, a := range resp.Attempts {
		v := attemptJSON(a)
		v.ModelUsage = usageJSON(a.GetModelUsage())
		views = append(views, v)
	}
	tv := taskJSON(resp.Task)
	tv.Host = resp.Task.GetLeaseHost()
	tv.ModelUsage = usageJSON(resp.Task.GetModelUsage())
	tree := make([]taskView, 0, len(resp.Tree))
	for _, n := range resp.Tree {
		tree = append(tree, taskJSON(n))
	}
	return map[string]any{"task": tv, "attempts": views, "attempts_omitted": resp.AttemptsOmitted,
		"unsettled_effects": effectsJSON(resp.UnsettledEffects), "tree": tree}
}

// The one-task acts, as `task cancel|resume|pause ID` and `taskhost mcp`
// make them.
func cancelTask(ctx context.Context, tc apipb.TaskServiceClient, id string) (*apipb.Task, error) {
	resp, err := tc.CancelTask(ctx, &apipb.CancelTaskRequest{TaskId: id})
	return resp.GetTask(), err
}

func resumeTask(ctx context.Context, tc apipb.TaskServiceClient, id string) (*apipb.Task, error) {
	resp, err := tc.ResumeTask(ctx, &apipb.ResumeTaskRequest{TaskId: id})
	return resp.GetTask(), err
}

func pauseTask(ctx context.Context, tc apipb.TaskServiceClient, id string) (*apipb.Task, error) {
	resp, err := tc.PauseTask(ctx, &apipb.PauseTaskRequest{TaskId: id})
	return resp.GetTask(), err
}

func taskCancelCmd(ctx context.Context, e *env, args []string) int {
	if bulkArgs(args) {
		return controlAllCmd(ctx, e, args, "cancel")
	}
	return taskChange(ctx, e, args, "cancel", "Cancels a task. Cancelling a cancelled task is a no-op; a completed or failed\ntask cannot be cancelled (exit 4). With --all (and no ID) cancels every\nunfinished task of yours (user_stop_all); an admin adds --all-principals.", cancelTask)
}

func taskResumeCmd(ctx context.Context, e *env, args []string) int {
	for _, a := range args {
		if a == "--all-interrupted" || a == "-all-interrupted" || strings.HasPrefix(a, "--all-interrupted=") {
			return resumeAllInterrupted(ctx, e, args)
		}
	}
	if bulkArgs(args) {
		return controlAllCmd(ctx, e, args, "resume")
	}
	return taskChange(ctx, e, args, "resume", "Resumes an interrupted task: same id, run id + 1, the last checkpoint and what\nis left of its budgets; with no free slot it joins the queue (pending). A\nfinished task cannot be resumed (exit 4). With --all (and no ID) resumes every\ninterrupted task of yours; an admin adds --all-principals for everyone's\n(--all-interrupted [--all] is the older spelling).", resumeTask)
}

// taskChange is cancel or resume: one call on one task, optionally watched.
func taskChange(ctx context.Context, e *env, args []string, verb, description string,
	call func(ctx context.Context, tc apipb.TaskServiceClient, id string) (*apipb.Task, error)) int {
	fs := flag.NewFlagSet("task "+verb, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	watch := fs.Bool("watch", false, "then watch the task until it stops running")
	noProgress := fs.Bool("no-progress", false, "with --watch: no live progress line, even on a terminal")
	fs.Usage = usageFunc(fs, "taskhost task "+verb+" ID [--watch [--no-progress]] [flags]", description)
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	pt, err := call(cctx, tc, pos[0])
	cancel()
	if err != nil {
		return cf.fail(e, err)
	}
	if *watch {
		// Only this run's events: the earlier ones are history.
		return watchTask(ctx, e, &cf, tc, pt.Id, watchOptions{minRun: pt.RunId, noProgress: *noProgress})
	}
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"task": taskJSON(pt)})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "task %s %s (run %d)\n", pt.Id, pt.Status, pt.RunId)
	return exitOK
}

func taskWatchCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task watch", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	var o watchOptions
	fs.DurationVar(&o.reconnect, "reconnect-timeout", 2*time.Minute, "how long to keep reconnecting when the daemon goes away")
	fs.BoolVar(&o.noProgress, "no-progress", false, "no live progress line, even on a terminal")
	fs.Usage = usageFunc(fs, "taskhost task watch ID [flags]",
		"Streams a task's events as they happen, with a one-line progress display on a\nterminal, until the task stops running. If the daemon restarts meanwhile, it\nreconnects and continues where it left off.\nExits 0 when the task completed, 1 failed or cancelled, 6 interrupted.")
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	if o.reconnect < 0 {
		return cf.fail(e, usageError("task watch: --reconnect-timeout must not be negative"))
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	return watchTask(ctx, e, &cf, tc, pos[0], o)
}
