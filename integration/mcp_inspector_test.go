package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// The reference MCP client: the MCP inspector's CLI from the npm registry,
// which a client config file (mcpServers, as Claude Desktop and other
// clients read it) points at `taskhost mcp`.
const (
	inspectorPackage = "@modelcontextprotocol/inspector-cli"
	inspectorVersion = "1.0.3"
	// inspectorEnv names an npm prefix holding the package
	// (npm install --prefix DIR inspectorPackage@inspectorVersion):
	// .ci/run installs it there and sets it.
	inspectorEnv = "TASKHOST_TEST_MCP_INSPECTOR"
)

// inspectorCLI returns node and the inspector CLI's script. Without the
// client installed the test skips, saying what to install; once
// inspectorEnv is set (as .ci/run sets it) a missing node or package is a
// failure, never a skip.
func inspectorCLI(t *testing.T) (node, script string) {
	t.Helper()
	prefix := os.Getenv(inspectorEnv)
	if prefix == "" {
		t.Skipf("the reference MCP client is not installed: run 'npm install --prefix DIR %s@%s' (Node.js 18 or later) and set %s=DIR (.ci/run does)",
			inspectorPackage, inspectorVersion, inspectorEnv)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("%s is set but node is not on PATH: %v", inspectorEnv, err)
	}
	pkg := filepath.Join(prefix, "node_modules", filepath.FromSlash(inspectorPackage))
	raw, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		t.Fatalf("%s=%s holds no %s: %v", inspectorEnv, prefix, inspectorPackage, err)
	}
	var meta struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil || meta.Version != inspectorVersion {
		t.Fatalf("%s in %s is version %q (%v), want %s", inspectorPackage, prefix, meta.Version, err, inspectorVersion)
	}
	return node, filepath.Join(pkg, "build", "cli.js")
}

// inspector runs the reference client once, headless (--cli), against the
// server "taskhost" of config, and decodes the JSON result it prints.
type inspector struct {
	node, script, config string
}

func (in inspector) run(t *testing.T, out any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.node, append([]string{in.script, "--config", in.config, "--server", "taskhost", "--cli"}, args...)...)
	// 1.0.3 looks for its package.json relative to the working directory
	// but imports it relative to its script: both agree in build/.
	cmd.Dir = filepath.Dir(in.script)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("inspector %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal([]byte(stdout.String()), out); err != nil {
		t.Fatalf("inspector %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
}

// inspectorResult is a tools/call result as the client prints it.
type inspectorResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

// call is an mcpCaller: each argument becomes a --tool-arg KEY=VALUE, which
// the client parses as JSON when it can (so 5 is a number) and else takes
// as a string.
func (in inspector) call(t *testing.T, tool string, args map[string]any, out any) string {
	t.Helper()
	cmdArgs := []string{"--method", "tools/call", "--tool-name", tool}
	for k, v := range args {
		s, ok := v.(string)
		if !ok {
			raw, _ := json.Marshal(v)
			s = string(raw)
		}
		cmdArgs = append(cmdArgs, "--tool-arg", k+"="+s)
	}
	var res inspectorResult
	in.run(t, &res, cmdArgs...)
	if len(res.Content) != 1 || res.Content[0].Type != "text" {
		t.Fatalf("%s: content %+v", tool, res.Content)
	}
	if res.IsError {
		return res.Content[0].Text
	}
	if out != nil {
		if err := json.Unmarshal(res.StructuredContent, out); err != nil {
			t.Fatalf("%s: %v\n%s", tool, err, res.StructuredContent)
		}
	}
	return ""
}

// The reference MCP client, started from an MCP client config as a user
// would write it (docs/mcp.md), creates a task, answers its approval and
// reads its result file through `taskhost mcp` and a real daemon.
func TestMCPReferenceClient(t *testing.T) {
	t.Parallel()
	node, script := inspectorCLI(t)
	d := mcpDaemon(t)
	config := filepath.Join(testwait.ShortTempDir(t), "mcp.json")
	raw, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"taskhost": map[string]any{
		"command": filepath.Join(binDir, "taskhost"), "args": []string{"mcp"},
		"env": map[string]string{"TASKHOST_DATA_DIR": d.dataDir},
	}}})
	if err := os.WriteFile(config, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	in := inspector{node: node, script: script, config: config}

	var tools struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	in.run(t, &tools, "--method", "tools/list")
	if len(tools.Tools) != 11 {
		t.Fatalf("tools/list: %+v", tools)
	}

	id := mcpCreateApproveComplete(t, in.call)

	var res struct {
		Contents []struct {
			URI      string `json:"uri"`
			MIMEType string `json:"mimeType"`
			Text     string `json:"text"`
		} `json:"contents"`
	}
	uri := "taskhost://tasks/" + id + "/files/" + mcpResultOn
	in.run(t, &res, "--method", "resources/read", "--uri", uri)
	if len(res.Contents) != 1 || res.Contents[0].Text != mcpResult || res.Contents[0].URI != uri {
		t.Fatalf("resources/read %s: %+v", uri, res)
	}

	// A refused argument reaches this client as a tool error it can show.
	if msg := in.call(t, "task_status", map[string]any{"task_id": strings.Repeat("x", 65)}, nil); !strings.Contains(msg, "task_id: is 65 bytes, the limit is 64") {
		t.Fatalf("an id past the limit: %q", msg)
	}
}
