package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/taskhost/taskhost/internal/testwait"
)

const (
	mcpToken  = "mcp-token-0123456789abcdef-not-a-real-secret"  // principal ci
	mcpToken2 = "mcp-token2-0123456789abcdef-not-a-real-secret" // principal ops
	// mcpCommand is what the scripted model runs in step 1: an approval
	// must show it whole, the newline escaped.
	mcpCommand  = "echo made over MCP > result.txt\necho done"
	mcpResult   = "made over MCP\n"
	mcpResultOn = "result.txt"
)

// mcpDaemon starts a daemon whose scripted legacy model runs mcpCommand
// (shell.run: approval always, the default) in step 1 and completes in
// step 2; it also listens on loopback for the token principals ci and ops.
func mcpDaemon(t *testing.T) *daemon {
	t.Helper()
	work := testwait.ShortTempDir(t)
	script := map[string]any{"version": 1, "rules": []any{
		map[string]any{"when": map[string]any{"last_role": "user", "contains": " step 1/"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "shell.run", "arguments": map[string]any{"command": mcpCommand}}}}},
		map[string]any{"when": map[string]any{"tool": "shell.run"}, "reply": map[string]any{"content": "ran the command"}},
		map[string]any{"when": map[string]any{}, "reply": map[string]any{"content": "TASK_COMPLETE: result.txt written"}},
	}}
	raw, _ := json.Marshal(script)
	scriptFile := filepath.Join(work, "script.json")
	if err := os.WriteFile(scriptFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	sum, sum2 := sha256.Sum256([]byte(mcpToken)), sha256.Sum256([]byte(mcpToken2))
	cfg := writeConfig(t, work, fmt.Sprintf("[model]\nscript = %q\n\n[api]\ntcp_listen = \"127.0.0.1:0\"\n\n[api.tokens]\nci = %q\nops = %q\n",
		scriptFile, hex.EncodeToString(sum[:]), hex.EncodeToString(sum2[:])))
	return startDaemon(t, filepath.Join(testwait.ShortTempDir(t), "data"), cfg)
}

// mcpSession starts `taskhost mcp ARGS...` as a real process and connects
// the Go SDK's client to it over stdio.
func mcpSession(t *testing.T, env []string, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "taskhost"), append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "taskhost-integration", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to taskhost mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("taskhost mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// callTool calls a tool; it returns the structured result decoded into
// out (when not nil), and the text of a tool error ("" when none).
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content blocks, want 1", name, len(res.Content))
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if res.IsError {
		return text
	}
	if out != nil {
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, data)
		}
		// The text block is the same JSON, for clients that read only text.
		var fromText any
		if err := json.Unmarshal([]byte(text), &fromText); err != nil || !reflect.DeepEqual(fromText, res.StructuredContent) {
			t.Fatalf("%s: the text content %s is not the structured content %s", name, text, data)
		}
	}
	return ""
}

type mcpApproval struct {
	ID, TaskID, Tool, Prompt, Status string
}

func (a *mcpApproval) UnmarshalJSON(b []byte) error {
	var v struct {
		ID     string `json:"id"`
		TaskID string `json:"task_id"`
		Tool   string `json:"tool"`
		Prompt string `json:"prompt"`
		Status string `json:"status"`
	}
	err := json.Unmarshal(b, &v)
	*a = mcpApproval{v.ID, v.TaskID, v.Tool, v.Prompt, v.Status}
	return err
}

// mcpCaller calls an MCP tool through some client: it decodes the
// structured result into out (when not nil) and returns the text of a
// tool error ("" when none).
type mcpCaller func(t *testing.T, tool string, args map[string]any, out any) string

// mcpCreateApproveComplete is the outside agent's round: create a task
// whose step 1 needs an approval, find that approval showing the whole
// command, approve it (a second approve is a conflict) and wait for the
// task to complete. It returns the task's id.
func mcpCreateApproveComplete(t *testing.T, call mcpCaller) string {
	t.Helper()
	var created oneTask
	if msg := call(t, "task_create", map[string]any{"goal": "write result.txt", "executor": "legacy", "max_steps": 5, "max_model_tokens": 500000, "max_output_bytes": 1 << 20}, &created); msg != "" {
		t.Fatal(msg)
	}
	id := created.Task.ID
	if b := created.Task.Budgets; !strings.HasPrefix(id, "t_") || b["steps"].Limit != 5 || b["model_tokens"].Limit != 500000 || b["output_bytes"].Limit != 1<<20 {
		t.Fatalf("created %+v", created.Task)
	}

	var pending mcpApproval
	testwait.Until(t, 60*time.Second, "the task's approval over MCP", func() bool {
		var list struct {
			Approvals []mcpApproval `json:"approvals"`
		}
		if msg := call(t, "approvals_list", nil, &list); msg != "" {
			t.Fatal(msg)
		}
		for _, a := range list.Approvals {
			if a.TaskID == id {
				pending = a
				return true
			}
		}
		return false
	})
	// The whole command, its newline escaped onto one line.
	wantShown := strings.ReplaceAll(mcpCommand, "\n", `\n`)
	if pending.Tool != "shell.run" || !strings.Contains(pending.Prompt, wantShown) || pending.Status != "pending" {
		t.Fatalf("approval %+v does not show the command %q", pending, wantShown)
	}
	var st statusJSON
	if msg := call(t, "task_status", map[string]any{"task_id": id}, &st); msg != "" || st.Task.Status != "waiting_approval" {
		t.Fatalf("task_status while waiting: %q %+v", msg, st.Task)
	}

	var approved struct {
		Approval mcpApproval `json:"approval"`
	}
	// For the task: the same command again would run without asking.
	if msg := call(t, "approval_approve", map[string]any{"approval_id": pending.ID, "for_task": true}, &approved); msg != "" {
		t.Fatal(msg)
	}
	if approved.Approval.Status != "approved" || !strings.Contains(approved.Approval.Prompt, wantShown) {
		t.Fatalf("approved %+v", approved.Approval)
	}
	// Approving twice is the API's conflict, as a tool error.
	if msg := call(t, "approval_approve", map[string]any{"approval_id": pending.ID}, nil); !strings.Contains(msg, "failed_precondition: approval "+pending.ID+" is already approved") {
		t.Errorf("a second approve: %q", msg)
	}

	testwait.Until(t, 60*time.Second, "the task to complete", func() bool {
		if msg := call(t, "task_status", map[string]any{"task_id": id}, &st); msg != "" {
			t.Fatal(msg)
		}
		if st.Task.Status == "failed" || st.Task.Status == "cancelled" || st.Task.Status == "interrupted" {
			t.Fatalf("task %s: %+v", st.Task.Status, st.Task)
		}
		return st.Task.Status == "completed"
	})

	return id
}

// An outside MCP client (the Go SDK's) drives a task through `taskhost mcp`
// against a real daemon: it creates the task, sees its approval with the
// whole command, approves it, waits for completion and reads the result
// file as a tool and as a resource.
func TestMCPCreateApproveReadResult(t *testing.T) {
	t.Parallel()
	d := mcpDaemon(t)
	cs := mcpSession(t, nil, "--data-dir", d.dataDir)

	ctx := context.Background()
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tl.Tools {
		names = append(names, tool.Name)
		if schema, _ := tool.InputSchema.(map[string]any); schema["type"] != "object" || schema["additionalProperties"] != false {
			t.Errorf("tool %s: input schema %v", tool.Name, tool.InputSchema)
		}
	}
	for _, want := range []string{"task_create", "task_list", "task_status", "task_cancel", "task_pause", "task_resume",
		"approvals_list", "approval_approve", "approval_reject", "task_files", "task_file_read"} {
		if !slices.Contains(names, want) {
			t.Errorf("no tool %s in %v", want, names)
		}
	}

	id := mcpCreateApproveComplete(t, func(t *testing.T, tool string, args map[string]any, out any) string {
		return callTool(t, cs, tool, args, out)
	})
	var files struct {
		Files []struct {
			Path string `json:"path"`
			Size int64  `json:"size"`
		} `json:"files"`
		URIPrefix string `json:"uri_prefix"`
	}
	if msg := callTool(t, cs, "task_files", map[string]any{"task_id": id}, &files); msg != "" {
		t.Fatal(msg)
	}
	if !slices.ContainsFunc(files.Files, func(f struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	}) bool {
		return f.Path == mcpResultOn && f.Size == int64(len(mcpResult))
	}) {
		t.Fatalf("task_files: %+v", files)
	}
	var file struct {
		Encoding string `json:"encoding"`
		Content  string `json:"content"`
		URI      string `json:"uri"`
	}
	if msg := callTool(t, cs, "task_file_read", map[string]any{"task_id": id, "path": mcpResultOn}, &file); msg != "" {
		t.Fatal(msg)
	}
	if file.Encoding != "utf-8" || file.Content != mcpResult || file.URI != files.URIPrefix+mcpResultOn {
		t.Fatalf("task_file_read: %+v", file)
	}
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: file.URI})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 || res.Contents[0].Text != mcpResult || !strings.HasPrefix(res.Contents[0].MIMEType, "text/plain") {
		t.Fatalf("resource %s: %+v", file.URI, res.Contents)
	}
	res, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "taskhost://tasks/" + id})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, `"status":"completed"`) {
		t.Fatalf("task resource: %+v", res.Contents)
	}
	templates, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 2 {
		t.Fatalf("resource templates: %v %+v", err, templates)
	}

	// What the CLI says of the same task, through the same API.
	var cli statusJSON
	d.cliJSON(t, &cli, "task", "status", id)
	if cli.Task.Status != "completed" || cli.Task.Budgets["tool_calls"].Used != 1 {
		t.Fatalf("task status: %+v", cli.Task)
	}
}

// Every argument is bounded: at the limit it reaches the daemon (which
// answers for itself), one past it is a tool error naming the field, the
// limit and the value, and nothing reaches the daemon.
func TestMCPBadInput(t *testing.T) {
	t.Parallel()
	d := mcpDaemon(t)
	cs := mcpSession(t, nil, "--data-dir", d.dataDir)
	atLimit, past := "t_"+strings.Repeat("a", 62), "t_"+strings.Repeat("a", 63)
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want []string // in the error; nil: no error
	}{
		{"id at the limit", "task_status", map[string]any{"task_id": atLimit}, []string{"not_found"}},
		{"id past the limit", "task_status", map[string]any{"task_id": past}, []string{"task_id: is 65 bytes, the limit is 64", `"t_aaaa`}},
		{"approval id past the limit", "approval_reject", map[string]any{"approval_id": "a_" + strings.Repeat("b", 63)}, []string{"approval_id: is 65 bytes, the limit is 64"}},
		{"missing id", "task_cancel", map[string]any{}, []string{"task_id: is required"}},
		{"id of the wrong type", "task_pause", map[string]any{"task_id": 7}, []string{"task_id: must be a string, not 7"}},
		{"unknown argument", "task_resume", map[string]any{"task_id": atLimit, "all": true}, []string{"all: unknown argument"}},
		{"limit at the bound", "task_list", map[string]any{"limit": 500}, nil},
		{"limit past the bound", "task_list", map[string]any{"limit": 501}, []string{"limit: is 501, outside the limits 1..500"}},
		{"limit below the bound", "task_list", map[string]any{"limit": 0}, []string{"limit: is 0, outside the limits 1..500"}},
		{"limit not an integer", "task_list", map[string]any{"limit": 1.5}, []string{"limit: must be an integer from 1 to 500, not 1.5"}},
		{"status not in the enum", "task_list", map[string]any{"status": []string{"running", "zombie"}}, []string{`status[1]: is "zombie": use one of pending`}},
		{"every status", "task_list", map[string]any{"status": []string{"pending", "running", "waiting_approval", "blocked", "completed", "failed", "cancelled", "interrupted"}}, nil},
		{"too many statuses", "task_list", map[string]any{"status": slices.Repeat([]string{"running"}, 9)}, []string{"status: has 9 items, the limit is 8"}},
		{"token budget past the bound", "task_create", map[string]any{"goal": "x", "max_model_tokens": int64(10_000_000_001)}, []string{"max_model_tokens: is 10000000001, outside the limits 0..10000000000"}},
		{"output budget past the bound", "task_create", map[string]any{"goal": "x", "max_output_bytes": int64(1<<40 + 1)}, []string{"max_output_bytes: is 1099511627777, outside the limits 0..1099511627776"}},
		{"pattern without for_task", "approval_approve", map[string]any{"approval_id": "a_x", "pattern": "ls *"}, []string{"pattern: needs for_task = true"}},
		{"pattern past the bound", "approval_approve", map[string]any{"approval_id": "a_x", "for_task": true, "pattern": strings.Repeat("p", 257)}, []string{"pattern: is 257 bytes, the limit is 256"}},
		{"for_task not a boolean", "approval_approve", map[string]any{"approval_id": "a_x", "for_task": "yes"}, []string{`for_task: must be true or false, not "yes"`}},
		{"approvals status", "approvals_list", map[string]any{"status": "maybe"}, []string{`status: is "maybe"`}},
		{"path at the limit", "task_file_read", map[string]any{"task_id": atLimit, "path": strings.Repeat("p", 512)}, []string{"not_found"}},
		{"path past the limit", "task_file_read", map[string]any{"task_id": atLimit, "path": strings.Repeat("p", 513)}, []string{"path: is 513 bytes, the limit is 512"}},
		{"goal past the spec bound", "task_create", map[string]any{"goal": strings.Repeat("g", 64<<10+1)}, []string{"goal: is 65537 bytes, the limit is 65536"}},
		{"goal past the daemon's limit", "task_create", map[string]any{"goal": strings.Repeat("g", 2001), "executor": "legacy"}, []string{"invalid_argument", "spec.goal", "2001", "2000"}},
		{"budget past the bound", "task_create", map[string]any{"goal": "x", "max_steps": int64(1) << 31}, []string{"max_steps: is 2147483648, outside the limits 0..2147483647"}},
		{"budget above the daemon's cap", "task_create", map[string]any{"goal": "x", "executor": "legacy", "max_steps": 1 << 30}, []string{"invalid_argument", "max_steps", "cap"}},
		{"options not an object", "task_create", map[string]any{"goal": "x", "options": []int{1}}, []string{"options: must be a JSON object, not [1]"}},
		{"value past the bound", "approval_approve", map[string]any{"approval_id": "a_x", "value": strings.Repeat("v", 64<<10)}, []string{"value: is 65538 bytes of JSON, the limit is 65536"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := callTool(t, cs, tc.tool, tc.args, nil)
			if tc.want == nil {
				if msg != "" {
					t.Fatalf("error %q", msg)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if len(msg) > 1000 {
				t.Errorf("the error quotes too much: %d bytes", len(msg))
			}
		})
	}
	// Nothing refused here was created.
	var list listJSON
	d.cliJSON(t, &list, "task", "list")
	if len(list.Tasks) != 0 {
		t.Fatalf("refused creates left tasks: %+v", list.Tasks)
	}
}

// A task file is read whole up to --max-file-bytes and refused one byte
// past it; another principal (a token on the loopback listener) sees none
// of the caller's tasks, approvals or files.
func TestMCPFileBoundAndPrincipal(t *testing.T) {
	t.Parallel()
	d := mcpDaemon(t)
	src := filepath.Join(testwait.ShortTempDir(t), "in.txt")
	if err := os.WriteFile(src, []byte(mcpResult), 0o600); err != nil {
		t.Fatal(err)
	}
	var created oneTask
	d.cliJSON(t, &created, "task", "create", "--executor", "legacy", "--goal", "hold a file", "--file", src+"="+mcpResultOn)
	id := created.Task.ID
	size := len(mcpResult)
	for _, tc := range []struct {
		max  int
		want string
	}{{size, ""}, {size - 1, fmt.Sprintf("file_too_large: result.txt is %d bytes, the limit is %d", size, size-1)}} {
		cs := mcpSession(t, nil, "--data-dir", d.dataDir, "--max-file-bytes", fmt.Sprint(tc.max))
		var file struct {
			Content string `json:"content"`
		}
		msg := callTool(t, cs, "task_file_read", map[string]any{"task_id": id, "path": mcpResultOn}, &file)
		if tc.want == "" && (msg != "" || file.Content != mcpResult) {
			t.Fatalf("--max-file-bytes %d: %q %q", tc.max, msg, file.Content)
		}
		if tc.want != "" && !strings.Contains(msg, tc.want) {
			t.Fatalf("--max-file-bytes %d: %q, want %q", tc.max, msg, tc.want)
		}
		_, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "taskhost://tasks/" + id + "/files/" + mcpResultOn})
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), "file_too_large")) {
			t.Fatalf("--max-file-bytes %d: the resource: %v", tc.max, err)
		}
	}

	if d.tcp == "" {
		t.Fatal("no token listener")
	}
	other := mcpSession(t, []string{"TASKHOST_TOKEN=" + mcpToken}, "--address", d.tcp)
	var list listJSON
	if msg := callTool(t, other, "task_list", nil, &list); msg != "" || len(list.Tasks) != 0 {
		t.Fatalf("another principal's task_list: %q %+v", msg, list.Tasks)
	}
	for _, tool := range []string{"task_status", "task_cancel", "task_files"} {
		if msg := callTool(t, other, tool, map[string]any{"task_id": id}, nil); !strings.Contains(msg, "not_found") {
			t.Errorf("another principal's %s: %q", tool, msg)
		}
	}
	if _, err := other.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "taskhost://tasks/" + id + "/files/" + mcpResultOn}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("another principal's resource read: %v", err)
	}
	// The caller's own task is untouched by the other's cancel.
	var st statusJSON
	d.cliJSON(t, &st, "task", "status", id)
	if st.Task.Status == "cancelled" {
		t.Fatal("another principal cancelled the task")
	}
}

// bearerTransport adds a bearer token to each request.
type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// `taskhost mcp --http` on loopback: one listener serves each caller as the
// principal of the token it sends, which the daemon checks; no token is a
// 401, a wrong one the daemon's refusal, and a non-loopback address or a
// socket daemon (where every caller would be one principal) is refused.
func TestMCPStreamableHTTP(t *testing.T) {
	t.Parallel()
	d := mcpDaemon(t)
	if d.tcp == "" {
		t.Fatal("no token listener")
	}
	for _, args := range [][]string{
		{"--http", "0.0.0.0:0", "--address", d.tcp},
		{"--http", "192.0.2.1:80", "--address", d.tcp},
		{"--http", "localhost:0", "--address", d.tcp},
		{"--http", "127.0.0.1:0", "--data-dir", d.dataDir},
	} {
		_, errOut, code := taskhost(t, append([]string{"mcp"}, args...)...)
		if code != 2 || !strings.Contains(errOut, "--http") {
			t.Errorf("mcp %v: exit %d %s", args, code, errOut)
		}
	}

	cmd := exec.Command(filepath.Join(binDir, "taskhost"), "mcp", "--http", "127.0.0.1:0", "--address", d.tcp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "serving streamable HTTP on "); ok {
				serving <- u
			}
		}
	}()
	var url string
	select {
	case url = <-serving:
	case <-time.After(30 * time.Second):
		t.Fatal("taskhost mcp --http did not say where it serves")
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/mcp") {
		t.Fatalf("serving on %q", url)
	}

	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: HTTP %d", resp.StatusCode)
	}
	// A page a browser loaded from elsewhere, its name rebound to
	// loopback: refused by its Host even with a token.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Host = "evil.example:80"
	req.Header.Set("Content-Type", "application/json")
	resp, err = (&http.Client{Transport: bearerTransport(mcpToken)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign Host: HTTP %d", resp.StatusCode)
	}

	session := func(tok string) *mcp.ClientSession {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := mcp.NewClient(&mcp.Implementation{Name: "taskhost-integration", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport(tok)}}, nil)
		if err != nil {
			t.Fatalf("connect over HTTP: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	ci, ops := session(mcpToken), session(mcpToken2)
	var created oneTask
	if msg := callTool(t, ci, "task_create", map[string]any{"goal": "over HTTP", "executor": "legacy"}, &created); msg != "" {
		t.Fatal(msg)
	}
	if created.Task.Principal != "ci" {
		t.Fatalf("created as %q, want ci", created.Task.Principal)
	}
	var st statusJSON
	if msg := callTool(t, ci, "task_status", map[string]any{"task_id": created.Task.ID}, &st); msg != "" || st.Task.ID != created.Task.ID {
		t.Fatalf("ci's own task: %q", msg)
	}
	if msg := callTool(t, ops, "task_status", map[string]any{"task_id": created.Task.ID}, nil); !strings.Contains(msg, "not_found") {
		t.Fatalf("ops sees ci's task: %q", msg)
	}
	var list listJSON
	if msg := callTool(t, ops, "task_list", nil, &list); msg != "" || len(list.Tasks) != 0 {
		t.Fatalf("ops's task_list: %q %+v", msg, list.Tasks)
	}
	// A wrong token passes the listener and is the daemon's refusal.
	wrong := session(mcpToken + "x")
	if msg := callTool(t, wrong, "task_list", nil, nil); !strings.Contains(msg, "unauthenticated") {
		t.Fatalf("a wrong token: %q", msg)
	}
}
