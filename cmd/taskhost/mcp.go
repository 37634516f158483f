package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// Bounds of `taskhost mcp`. The id, spec and message bounds are the API's
// own, so that what the MCP side admits the daemon checks further, never
// the other way round.
const (
	// mcpMaxMessageBytes bounds one inbound JSON-RPC message (the API's
	// request bound).
	mcpMaxMessageBytes = 1 << 20
	mcpMaxIDBytes      = 64       // a task or approval id
	mcpMaxSpecBytes    = 64 << 10 // a goal, the executor options: the API's spec bound
	mcpMaxValueBytes   = 64 << 10 // an answer to a question, as `approve --value`
	mcpMaxExecutor     = 32       // an executor kind
	mcpMaxBudget       = math.MaxInt32
	// The token and output budgets reach past int32: their config caps'
	// upper bounds (tasks.max_model_tokens_cap, max_output_bytes_cap).
	mcpMaxModelTokens  = 10_000_000_000
	mcpMaxOutputBytes  = 1 << 40
	mcpMaxPatternBytes = 256 // approve --pattern's bound
	mcpMaxListLimit    = 500 // the API's page bound
	mcpMaxAttempts     = 500 // the API's attempt bound
	// Files are sent whole in one reply: their default and largest size.
	mcpDefaultFileBytes = 1 << 20
	mcpMaxFileBytes     = 8 << 20
)

// mcpStatuses are the task statuses task_list filters by.
var mcpStatuses = []string{"pending", "running", "waiting_approval", "blocked", "completed", "failed", "cancelled", "interrupted"}

// mcpFileTemplate names a file of a task's workspace as an MCP resource.
const (
	mcpURIPrefix    = "taskhost://tasks/"
	mcpFileTemplate = mcpURIPrefix + "{task_id}/files/{+path}"
	mcpTaskTemplate = mcpURIPrefix + "{task_id}"
)

func mcpCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	maxFile := fs.Int64("max-file-bytes", mcpDefaultFileBytes, fmt.Sprintf("the largest task file task_file_read and a file resource return (1..%d)", int64(mcpMaxFileBytes)))
	fs.Usage = usageFunc(fs, "taskhost mcp [--data-dir DIR | --socket PATH | --address IP:PORT [--http IP:PORT]] [--max-file-bytes N]",
		"Serves the Model Context Protocol on stdin and stdout for an outside agent:\nthe task operations, approvals and task files as MCP tools and resources, as\nthe calling user (it is a client of the running daemon, like every task\ncommand). Configure it as an MCP server command in your client; docs/mcp.md\nlists every tool. Ends when the client closes stdin.")
	httpAddr := fs.String("http", "", "serve streamable HTTP on this loopback IP:PORT (path /mcp) instead of stdio; needs --address: each request's bearer token is passed on to the daemon")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if *maxFile < 1 || *maxFile > mcpMaxFileBytes {
		return cf.fail(e, usageError(fmt.Sprintf("mcp: --max-file-bytes is %d, outside the limits 1..%d", *maxFile, int64(mcpMaxFileBytes))))
	}
	if *httpAddr != "" {
		if err := checkLoopback(*httpAddr); err != nil {
			return cf.fail(e, usageError("mcp: "+err.Error()))
		}
		if cf.address == "" {
			// Over the socket every HTTP caller would be this process's
			// principal: only the daemon's token listener tells them apart.
			return cf.fail(e, usageError("mcp: --http needs --address IP:PORT of the daemon's token listener: each HTTP caller is the principal of the bearer token it sends"))
		}
	}
	var conn *grpc.ClientConn
	var err error
	if *httpAddr != "" {
		conn, err = cf.dialWith(callerBearer{})
	} else {
		conn, err = cf.dial()
	}
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	m := &mcpServer{cf: &cf, tasks: apipb.NewTaskServiceClient(conn), approvals: apipb.NewApprovalServiceClient(conn), maxFileBytes: *maxFile}
	if *httpAddr != "" {
		if err := serveMCPHTTP(ctx, e, m, *httpAddr); err != nil {
			errorf(e, "mcp: %v", err)
			return exitUnavailable
		}
		return exitOK
	}
	t := &mcp.IOTransport{Reader: io.NopCloser(e.stdin), Writer: nopWriteCloser{e.stdout}, MaxLineLength: mcpMaxMessageBytes}
	if err := m.server().Run(ctx, t); err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		errorf(e, "mcp: %v", err)
		return exitUnavailable
	}
	return exitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// mcpServer answers MCP calls with the daemon's API, as the principal the
// daemon sees on the connection.
type mcpServer struct {
	cf           *clientFlags
	tasks        apipb.TaskServiceClient
	approvals    apipb.ApprovalServiceClient
	maxFileBytes int64
}

// mcpTool is one tool: its arguments and what it does with them.
type mcpTool struct {
	name, desc  string
	params      []mcpParam
	readOnly    bool
	destructive bool
	run         func(ctx context.Context, a mcpArgs) (any, error)
}

func idParam(name, what string) mcpParam {
	return mcpParam{name: name, typ: "string", required: true, maxBytes: mcpMaxIDBytes, desc: what}
}

func (m *mcpServer) tools() []mcpTool {
	taskID := idParam("task_id", "the task's id (t_...)")
	change := func(name, desc string, act func(context.Context, apipb.TaskServiceClient, string) (*apipb.Task, error)) mcpTool {
		return mcpTool{name: name, desc: desc, params: []mcpParam{taskID}, destructive: true,
			run: func(ctx context.Context, a mcpArgs) (any, error) {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				defer cancel()
				t, err := act(cctx, m.tasks, a.str("task_id"))
				if err != nil {
					return nil, err
				}
				return map[string]any{"task": taskJSON(t)}, nil
			}}
	}
	budgetUpTo := func(name, what string, most int64) mcpParam {
		return mcpParam{name: name, typ: "integer", min: 0, max: most,
			desc: what + " (0: the daemon's default; above the daemon's cap is refused)"}
	}
	budget := func(name, what string) mcpParam { return budgetUpTo(name, what, mcpMaxBudget) }
	return []mcpTool{
		{name: "task_create", desc: "Create a task in the taskhost daemon and start it (or queue it). Returns the task; follow it with task_status.",
			params: []mcpParam{
				{name: "goal", typ: "string", required: true, maxBytes: mcpMaxSpecBytes, desc: "what the task is to achieve; the daemon refuses more than its tasks.goal_chars (default 2000) characters"},
				{name: "executor", typ: "string", maxBytes: mcpMaxExecutor, desc: "executor kind, e.g. legacy (default: the daemon's tasks.executor)"},
				{name: "options", typ: "object", maxBytes: mcpMaxSpecBytes, desc: "executor options, merged into the task spec beside the goal (docs/cli.md, --spec-file)"},
				budget("max_steps", "step budget"), budget("max_tool_calls", "tool-call budget"), budget("max_model_calls", "model-call budget"),
				budget("max_depth", "recursion depth budget"), budget("max_wall_seconds", "active wall-clock budget in seconds"),
				budgetUpTo("max_model_tokens", "model-token budget, prompt + completion", mcpMaxModelTokens),
				budgetUpTo("max_output_bytes", "budget of bytes handed back by model and tool calls", mcpMaxOutputBytes),
			},
			run: m.taskCreate},
		{name: "task_list", desc: "List your tasks, newest first.", readOnly: true,
			params: []mcpParam{
				{name: "status", typ: "strings", maxItems: len(mcpStatuses), enum: mcpStatuses, desc: "only tasks in these statuses"},
				{name: "executor", typ: "string", maxBytes: mcpMaxExecutor, desc: "only tasks of this executor kind"},
				{name: "sort", typ: "string", maxBytes: 16, enum: []string{"-created", "created", "status"}, def: "-created", desc: "-created (newest first), created (oldest first) or status"},
				{name: "limit", typ: "integer", min: 1, max: mcpMaxListLimit, def: 100, desc: "list at most this many tasks"},
			},
			run: m.taskList},
		{name: "task_status", desc: "Show a task: status and reason, budgets as used/limit, result, its attempt log and unsettled effects.", readOnly: true,
			params: []mcpParam{taskID, {name: "attempts", typ: "integer", min: 1, max: mcpMaxAttempts, def: 50, desc: "this many of the most recent attempts"}},
			run:    m.taskStatus},
		change("task_cancel", "Cancel a task (user_cancelled). Cancelling a cancelled task is a no-op; a finished task is a conflict.", cancelTask),
		change("task_pause", "Pause a task: it becomes interrupted (user_pause) and goes on only when resumed.", pauseTask),
		change("task_resume", "Resume an interrupted task: same id, the last checkpoint and what is left of its budgets.", resumeTask),
		{name: "approvals_list", desc: "List your approvals, oldest first, with the whole command or prompt each would allow (prompt), as the host shows it.", readOnly: true,
			params: []mcpParam{{name: "status", typ: "string", maxBytes: 16, enum: []string{"pending", "approved", "rejected", "expired", "cancelled", "all"}, def: "pending", desc: "which approvals"}},
			run:    m.approvalsList},
		{name: "approval_approve", desc: "Approve a pending approval: the gated effect (the command in its prompt) runs and the task goes on. Returns the approval with that command.",
			params: []mcpParam{idParam("approval_id", "the approval's id (a_...)"),
				{name: "value", typ: "any", maxBytes: mcpMaxValueBytes, desc: "the answer to a question (an approval of kind input): one JSON value"},
				{name: "for_task", typ: "boolean", desc: "also allow, for the rest of the task, the same call again (same tool and arguments), or with pattern the same tool's matching calls (a tool call's approval only)"},
				{name: "pattern", typ: "string", maxBytes: mcpMaxPatternBytes, desc: "with for_task: a glob the calls' command/arguments must match ('*' any run of characters, '?' one)"}},
			destructive: true, run: m.resolver(true)},
		{name: "approval_reject", desc: "Reject a pending approval: the gated effect never runs and the task fails (approval_rejected).",
			params: []mcpParam{idParam("approval_id", "the approval's id (a_...)")}, destructive: true, run: m.resolver(false)},
		{name: "task_files", desc: "List a task's workspace (or the directory path in it): every entry below it, at most 10000. Read a file with task_file_read or as the resource " + mcpFileTemplate + ".", readOnly: true,
			params: []mcpParam{taskID, {name: "path", typ: "string", maxBytes: tools.MaxPathBytes, desc: "a directory relative to the workspace (default: the workspace)"}},
			run:    m.taskFiles},
		{name: "task_file_read", desc: "Read a regular file of a task's workspace: UTF-8 text as it is, anything else base64.", readOnly: true,
			params: []mcpParam{taskID, {name: "path", typ: "string", required: true, maxBytes: tools.MaxPathBytes, desc: "the file, relative to the workspace"}},
			run:    m.taskFileRead},
	}
}

func (m *mcpServer) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "taskhost", Title: "taskhost", Version: version}, &mcp.ServerOptions{
		Instructions: "taskhost runs persistent, resumable, bounded agent tasks. Create one with task_create, follow it with task_status, answer its approvals with approvals_list and approval_approve or approval_reject, and read its results with task_files and task_file_read (or the resource " + mcpFileTemplate + ").",
	})
	for _, t := range m.tools() {
		tool := &mcp.Tool{Name: t.name, Description: t.desc, InputSchema: mcpSchema(t.params),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: t.readOnly}}
		if !t.readOnly {
			tool.Annotations.DestructiveHint = &t.destructive
		}
		s.AddTool(tool, m.handler(t))
	}
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "task-file", Title: "a file of a task's workspace", URITemplate: mcpFileTemplate,
		Description: fmt.Sprintf("a regular file of one of your tasks' workspace, at most %d bytes: text/plain when UTF-8, else application/octet-stream (base64)", m.maxFileBytes)},
		m.readResource)
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "task", Title: "a task", URITemplate: mcpTaskTemplate, MIMEType: "application/json",
		Description: "one of your tasks as task_status shows it"}, m.readResource)
	return s
}

// handler runs t on a call: its arguments checked, a failure returned as a
// tool error the calling model can read (MCP's rule: a tool's own failure
// is a result with isError, not a protocol error).
func (m *mcpServer) handler(t mcpTool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx = withCaller(ctx, req.Extra)
		args, err := parseMCPArgs(req.Params.Arguments, t.params)
		var out any
		if err == nil {
			out, err = t.run(ctx, args)
		}
		if err != nil {
			v := m.toolErrorView(err)
			return &mcp.CallToolResult{IsError: true, StructuredContent: v,
				Content: []mcp.Content{&mcp.TextContent{Text: t.name + ": " + v.Error.Code + ": " + v.Error.Message}}}, nil
		}
		data, err := json.Marshal(out)
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{StructuredContent: json.RawMessage(data), Content: []mcp.Content{&mcp.TextContent{Text: string(data)}}}, nil
	}
}

// toolErrorView is the --json error shape of the CLI, for a refused
// argument too.
func (m *mcpServer) toolErrorView(err error) errorView {
	var ie *mcpInputError
	var fe *fileTooLargeError
	switch {
	case errors.As(err, &ie):
		var v errorView
		v.Error.Code, v.Error.Field, v.Error.Message, v.ExitCode = "invalid_argument", ie.field, ie.Error(), exitUsage
		return v
	case errors.As(err, &fe):
		var v errorView
		v.Error.Code, v.Error.Field, v.Error.Message, v.ExitCode = "file_too_large", "path", fe.Error()+" (taskhost mcp --max-file-bytes)", exitConflict
		return v
	}
	return m.cf.errorViewOf(err)
}

func (m *mcpServer) taskCreate(ctx context.Context, a mcpArgs) (any, error) {
	spec := map[string]json.RawMessage{}
	if o, ok := a["options"]; ok {
		if err := json.Unmarshal(o, &spec); err != nil {
			return nil, &mcpInputError{"options", "must be a JSON object: " + err.Error()}
		}
	}
	delete(spec, "goal") // the goal argument is the goal
	data, err := specWithGoal(spec, a.str("goal"))
	if err != nil {
		return nil, err
	}
	if len(data) > mcpMaxSpecBytes {
		return nil, &mcpInputError{"options", fmt.Sprintf("the spec (goal and options) is %d bytes of JSON, the limit is %d", len(data), mcpMaxSpecBytes)}
	}
	lim := &apipb.Limits{MaxSteps: a.int("max_steps", 0), MaxToolCalls: a.int("max_tool_calls", 0), MaxModelCalls: a.int("max_model_calls", 0),
		MaxDepth: a.int("max_depth", 0), MaxWallSeconds: a.int("max_wall_seconds", 0),
		MaxModelTokens: a.int("max_model_tokens", 0), MaxOutputBytes: a.int("max_output_bytes", 0)}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := m.tasks.CreateTask(cctx, &apipb.CreateTaskRequest{Executor: a.str("executor"), Spec: data, Limits: lim})
	if err != nil {
		return nil, err
	}
	return map[string]any{"task": taskJSON(resp.Task)}, nil
}

func (m *mcpServer) taskList(ctx context.Context, a mcpArgs) (any, error) {
	sortBy := a.str("sort")
	if sortBy == "" {
		sortBy = "-created"
	}
	all, total, err := listTasks(ctx, m.tasks, &apipb.ListTasksRequest{Status: a.strs("status"), Sort: sortBy, Executor: a.str("executor")}, int(a.int("limit", 100)))
	if err != nil {
		return nil, err
	}
	return taskListJSON(all, total, sortBy), nil
}

func (m *mcpServer) taskStatus(ctx context.Context, a mcpArgs) (any, error) {
	return m.status(ctx, a.str("task_id"), int32(a.int("attempts", 50)))
}

func (m *mcpServer) status(ctx context.Context, id string, attempts int32) (map[string]any, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := m.tasks.GetTask(cctx, &apipb.GetTaskRequest{TaskId: id, AttemptsLimit: attempts})
	if err != nil {
		return nil, err
	}
	return taskStatusJSON(resp), nil
}

func (m *mcpServer) approvalsList(ctx context.Context, a mcpArgs) (any, error) {
	filter := a.str("status")
	switch filter {
	case "":
		filter = "pending"
	case "all":
		filter = ""
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := m.approvals.ListApprovals(cctx, &apipb.ListApprovalsRequest{Status: filter})
	if err != nil {
		return nil, err
	}
	return approvalListJSON(resp), nil
}

func (m *mcpServer) resolver(approve bool) func(context.Context, mcpArgs) (any, error) {
	return func(ctx context.Context, a mcpArgs) (any, error) {
		req := &apipb.ResolveApprovalRequest{ApprovalId: a.str("approval_id"), ValueJson: string(a["value"]), ForTask: a.bool("for_task"), Pattern: a.str("pattern")}
		if req.Pattern != "" && !req.ForTask {
			return nil, &mcpInputError{"pattern", "needs for_task = true"}
		}
		ap, err := resolveApproval(ctx, m.approvals, approve, req)
		if err != nil {
			return nil, err
		}
		return map[string]any{"approval": approvalJSON(ap)}, nil
	}
}

func (m *mcpServer) taskFiles(ctx context.Context, a mcpArgs) (any, error) {
	id := a.str("task_id")
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := m.tasks.ListTaskFiles(cctx, &apipb.ListTaskFilesRequest{TaskId: id, Path: a.str("path")})
	if err != nil {
		return nil, err
	}
	return map[string]any{"files": fileViews(resp), "truncated": resp.Truncated, "uri_prefix": mcpURIPrefix + url.PathEscape(id) + "/files/"}, nil
}

// taskFileView is a file read whole: its content as UTF-8 text, or base64.
type taskFileView struct {
	TaskID   string `json:"task_id"`
	Path     string `json:"path"`
	URI      string `json:"uri"`
	Size     int64  `json:"size"`
	Encoding string `json:"encoding"` // utf-8 | base64
	Content  string `json:"content"`
}

func (m *mcpServer) readFile(ctx context.Context, id, path string) (taskFileView, error) {
	var buf strings.Builder
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	size, err := receiveTaskFile(cctx, m.tasks, id, path, m.maxFileBytes, &buf)
	if err != nil {
		return taskFileView{}, err
	}
	v := taskFileView{TaskID: id, Path: path, URI: mcpURIPrefix + url.PathEscape(id) + "/files/" + escapePath(path), Size: size, Encoding: "utf-8", Content: buf.String()}
	if !utf8.ValidString(v.Content) {
		v.Encoding, v.Content = "base64", base64.StdEncoding.EncodeToString([]byte(v.Content))
	}
	return v, nil
}

func (m *mcpServer) taskFileRead(ctx context.Context, a mcpArgs) (any, error) {
	return m.readFile(ctx, a.str("task_id"), a.str("path"))
}

// escapePath escapes each segment of a workspace path for a URI.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// readResource reads taskhost://tasks/ID (the task) or
// taskhost://tasks/ID/files/PATH (a file).
func (m *mcpServer) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx = withCaller(ctx, req.Extra)
	uri := req.Params.URI
	if len(uri) > len(mcpURIPrefix)+mcpMaxIDBytes+len("/files/")+3*tools.MaxPathBytes {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("uri: is %d bytes, the limit is %d", len(uri), len(mcpURIPrefix)+mcpMaxIDBytes+len("/files/")+3*tools.MaxPathBytes)}
	}
	rest, ok := strings.CutPrefix(uri, mcpURIPrefix)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	idPart, filePart, isFile := strings.Cut(rest, "/files/")
	id, err := url.PathUnescape(idPart)
	if err != nil || id == "" || strings.Contains(id, "/") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err := (mcpParam{name: "task_id", typ: "string", maxBytes: mcpMaxIDBytes}).checkString("task_id", id); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	var contents *mcp.ResourceContents
	if !isFile {
		v, err := m.status(ctx, id, 50)
		if err != nil {
			return nil, m.resourceError(uri, err)
		}
		data, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		contents = &mcp.ResourceContents{URI: uri, MIMEType: "application/json", Text: string(data)}
	} else {
		path, err := url.PathUnescape(filePart)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "uri: the path is not escaped right: " + err.Error()}
		}
		if err := (mcpParam{name: "path", typ: "string", maxBytes: tools.MaxPathBytes}).checkString("path", path); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		f, err := m.readFile(ctx, id, path)
		if err != nil {
			return nil, m.resourceError(uri, err)
		}
		contents = &mcp.ResourceContents{URI: uri, MIMEType: "text/plain; charset=utf-8", Text: f.Content}
		if f.Encoding == "base64" {
			raw, _ := base64.StdEncoding.DecodeString(f.Content)
			contents = &mcp.ResourceContents{URI: uri, MIMEType: "application/octet-stream", Blob: raw}
		}
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contents}}, nil
}

// resourceError is a failed read as a JSON-RPC error: not found as MCP's
// resource-not-found, anything else with the CLI's error view as its data.
func (m *mcpServer) resourceError(uri string, err error) error {
	v := m.toolErrorView(err)
	if v.ExitCode == exitNotFound {
		return mcp.ResourceNotFoundError(uri)
	}
	data, _ := json.Marshal(v)
	code := int64(jsonrpc.CodeInternalError)
	if v.ExitCode == exitUsage || v.ExitCode == exitConflict {
		code = jsonrpc.CodeInvalidParams
	}
	return &jsonrpc.Error{Code: code, Message: v.Error.Code + ": " + v.Error.Message, Data: data}
}
