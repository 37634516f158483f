package tools

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
)

func TestNewRegistryDefaults(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.Specs() {
		names = append(names, s.Name)
	}
	want := []string{ToolShellRun, ToolTaskCancel, ToolTaskCreate, ToolTaskDelegate, ToolTaskList, ToolTaskPause, ToolTaskResume, ToolTaskStatus, ToolTimeSleep, ToolWorkspaceList, ToolWorkspaceRead, ToolWorkspaceWrite}
	if !slices.Equal(names, want) {
		t.Fatalf("Specs names = %v, want %v", names, want)
	}
	for name, ct := range config.Default().Tools {
		p, ok := r.Policy(name)
		if !ok {
			t.Fatalf("Policy(%q) missing", name)
		}
		wantP := Policy{Enabled: ct.Enabled, NeedsApproval: ct.Approval == config.ApprovalAlways, Timeout: time.Duration(ct.TimeoutSeconds) * time.Second}
		if p != wantP {
			t.Errorf("Policy(%q) = %+v, want %+v", name, p, wantP)
		}
	}
	if p, _ := r.Policy(ToolShellRun); !p.NeedsApproval {
		t.Error("shell.run does not need approval by default")
	}
	if _, ok := r.Policy("nope"); ok {
		t.Error("Policy of an unknown tool reported ok")
	}
}

func TestNewRegistryRejects(t *testing.T) {
	t.Parallel()
	ok := config.Tool{Enabled: true, Approval: config.ApprovalNever, TimeoutSeconds: 10}
	tests := []struct {
		name string
		cfg  map[string]config.Tool
		root string
		want string
	}{
		{"unknown tool", map[string]config.Tool{"net.fetch": ok}, "/abs", "unknown tool"},
		{"bad approval", map[string]config.Tool{ToolShellRun: {Enabled: true, Approval: "sometimes", TimeoutSeconds: 1}}, "/abs", "approval"},
		{"empty approval", map[string]config.Tool{ToolShellRun: {Enabled: true, TimeoutSeconds: 1}}, "/abs", "approval"},
		{"zero timeout", map[string]config.Tool{ToolShellRun: {Enabled: true, Approval: config.ApprovalNever}}, "/abs", "timeout_seconds"},
		{"timeout past 3600", map[string]config.Tool{ToolShellRun: {Enabled: true, Approval: config.ApprovalNever, TimeoutSeconds: 3601}}, "/abs", "timeout_seconds"},
		{"relative root", nil, "data/workspaces", "absolute"},
		{"empty root", nil, "", "absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRegistry(tt.cfg, tt.root)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewRegistry error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	// The limits of the timeout range are accepted.
	for _, secs := range []int{1, 3600} {
		if _, err := NewRegistry(map[string]config.Tool{ToolShellRun: {Approval: config.ApprovalNever, TimeoutSeconds: secs}}, "/abs"); err != nil {
			t.Errorf("timeout_seconds %d refused: %v", secs, err)
		}
	}
}

func TestSpecsOnlyEnabled(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, map[string]config.Tool{ToolShellRun: {Enabled: false, Approval: config.ApprovalAlways, TimeoutSeconds: 60}})
	for _, s := range r.Specs() {
		if s.Name == ToolShellRun {
			t.Fatal("Specs lists the disabled shell.run")
		}
	}
	p, ok := r.Policy(ToolShellRun)
	if !ok || p.Enabled {
		t.Fatalf("Policy(shell.run) = %+v, %v; want disabled, true", p, ok)
	}
}

// TestSpecsParametersMatchArguments keeps each tool's JSON schema and the
// arguments it accepts in step.
func TestSpecsParametersMatchArguments(t *testing.T) {
	t.Parallel()
	for _, b := range builtins() {
		t.Run(b.spec.Name, func(t *testing.T) {
			var schema struct {
				Type                 string                     `json:"type"`
				Properties           map[string]json.RawMessage `json:"properties"`
				Required             []string                   `json:"required"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			}
			if err := json.Unmarshal([]byte(b.spec.Parameters), &schema); err != nil {
				t.Fatalf("Parameters is not JSON: %v", err)
			}
			if schema.Type != "object" || schema.AdditionalProperties == nil || *schema.AdditionalProperties {
				t.Errorf("schema must be a closed object: %s", b.spec.Parameters)
			}
			if got := slices.Sorted(maps.Keys(schema.Properties)); !slices.Equal(got, b.fields) {
				t.Errorf("schema properties %v, accepted arguments %v", got, b.fields)
			}
			if !slices.IsSorted(b.fields) {
				t.Errorf("fields %v are not sorted", b.fields)
			}
			for _, f := range schema.Required {
				if !slices.Contains(b.fields, f) {
					t.Errorf("required %q is not an accepted argument", f)
				}
			}
			if b.spec.Description == "" {
				t.Error("no description")
			}
		})
	}
}

func TestCallUnknownAndDisabled(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, map[string]config.Tool{ToolWorkspaceWrite: {Enabled: false, Approval: config.ApprovalNever, TimeoutSeconds: 10}})
	tests := []struct {
		name string
		tool string
		want error
	}{
		{"unknown", "net.fetch", ErrUnknownTool},
		{"empty name", "", ErrUnknownTool},
		{"disabled", ToolWorkspaceWrite, ErrDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := callTool(t, t.Context(), r, tt.tool, map[string]any{"path": "a", "content": "x"})
			if !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
		})
	}
	// A refused call touches nothing.
	if _, err := os.Stat(r.root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("workspace root exists after refused calls: %v", err)
	}
}

func TestCallInvalidEnv(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws, err := r.Workspace(testTask)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  Env
		ok   bool
	}{
		{"valid", Env{TaskID: testTask}, true},
		{"valid with its workspace", Env{TaskID: testTask, Workspace: ws}, true},
		{"id of 64 bytes", Env{TaskID: strings.Repeat("a", 64)}, true},
		{"id of 65 bytes", Env{TaskID: strings.Repeat("a", 65)}, false},
		{"empty id", Env{}, false},
		{"upper case", Env{TaskID: "Task"}, false},
		{"dot dot", Env{TaskID: ".."}, false},
		{"slash", Env{TaskID: "a/b"}, false},
		{"other workspace", Env{TaskID: testTask, Workspace: t.TempDir()}, false},
		{"another task's workspace", Env{TaskID: testTask, Workspace: filepath.Join(filepath.Dir(ws), "task_2")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Call(t.Context(), tt.env, ToolWorkspaceList, nil)
			if tt.ok && err != nil {
				t.Fatalf("Call: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidEnv) {
				t.Fatalf("error = %v, want ErrInvalidEnv", err)
			}
		})
	}
}

func TestCallArgErrors(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	tests := []struct {
		name  string
		tool  string
		args  string
		field string
		want  string
	}{
		{"array", ToolWorkspaceList, `[]`, "", "JSON object"},
		{"string", ToolWorkspaceList, `"x"`, "", "JSON object"},
		{"invalid JSON", ToolWorkspaceList, `{"path":`, "", "valid JSON"},
		{"trailing data", ToolWorkspaceList, `{} {}`, "", "valid JSON"},
		{"unknown argument", ToolWorkspaceRead, `{"path":"a","mode":1}`, "mode", "accepted: limit, offset, path"},
		{"missing required", ToolWorkspaceWrite, `{"path":"a"}`, "content", "required"},
		{"null required", ToolWorkspaceWrite, `{"path":"a","content":null}`, "content", "required"},
		{"wrong type", ToolWorkspaceRead, `{"path":7}`, "path", "string"},
		{"fractional offset", ToolWorkspaceRead, `{"path":"a","offset":1.5}`, "offset", "integer"},
		{"negative offset", ToolWorkspaceRead, `{"path":"a","offset":-1}`, "offset", "non-negative"},
		{"negative limit", ToolWorkspaceRead, `{"path":"a","limit":-1}`, "limit", "0..262144"},
		{"append not bool", ToolWorkspaceWrite, `{"path":"a","content":"","append":"yes"}`, "append", "boolean"},
		{"empty command", ToolShellRun, `{"command":"  "}`, "command", "empty"},
		{"NUL in command", ToolShellRun, `{"command":"echo \u0000"}`, "command", "NUL"},
		{"seconds not a number", ToolTimeSleep, `{"seconds":"1"}`, "seconds", "number"},
		{"negative seconds", ToolTimeSleep, `{"seconds":-0.5}`, "seconds", "0..60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := callTool(t, t.Context(), r, tt.tool, json.RawMessage(tt.args))
			wantArgError(t, err, tt.field, tt.want)
			if !strings.Contains(err.Error(), tt.tool) {
				t.Errorf("error %q does not name the tool", err)
			}
		})
	}
}

// TestArgsSizeLimit pads arguments with JSON whitespace to exactly the limit
// and one byte past it.
func TestArgsSizeLimit(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	pad := func(prefix string, size int) json.RawMessage {
		return json.RawMessage(prefix + strings.Repeat(" ", size-len(prefix)-1) + "}")
	}
	tests := []struct {
		name  string
		tool  string
		args  json.RawMessage
		refus bool
	}{
		{"read at limit", ToolWorkspaceRead, pad(`{"path":"missing"`, MaxArgsBytes), false},
		{"read past limit", ToolWorkspaceRead, pad(`{"path":"missing"`, MaxArgsBytes+1), true},
		{"list past limit", ToolWorkspaceList, pad(`{`, MaxArgsBytes+1), true},
		{"write at limit", ToolWorkspaceWrite, pad(`{"path":"a","content":""`, MaxWriteArgsBytes), false},
		{"write past limit", ToolWorkspaceWrite, pad(`{"path":"a","content":""`, MaxWriteArgsBytes+1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := callTool(t, t.Context(), r, tt.tool, tt.args)
			ae, isArg := errors.AsType[*ArgError](err)
			sizeRefusal := isArg && ae.Field == "" && strings.Contains(ae.Message, "the limit is")
			if sizeRefusal != tt.refus {
				t.Fatalf("len %d: error = %v; want size refusal %v", len(tt.args), err, tt.refus)
			}
		})
	}
}

func TestCallNotStartedAfterCancel(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ctx, cancel := context.WithCancelCause(t.Context())
	cause := errors.New("user cancelled the task")
	cancel(cause)
	_, err := callTool(t, ctx, r, ToolWorkspaceWrite, map[string]any{"path": "a.txt", "content": "x"})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("error = %v, want context.Canceled wrapping the cause", err)
	}
	if _, err := os.Stat(r.root); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the cancelled write touched the workspace")
	}
}
