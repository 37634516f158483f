package host

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// The Python SDK's example as a daemon's config registers it: pinned with
// its interpreter. Both pins right, a task completes through it; a wrong
// pin of either refuses the executor, naming which.
func TestInterpretedExecutorPinned(t *testing.T) {
	t.Parallel()
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Skipf("%s lacks grpc or protobuf, the Python SDK's dependencies: %v %s", py, err, out)
	}
	root := testwait.PluginDir(t)
	if err := testbin.PythonSDK("..", root); err != nil {
		t.Fatal(err)
	}
	sdkDir := filepath.Join(root, "sdk", "python")
	script := filepath.Join(sdkDir, "examples", "pynotes.py")
	good := config.Executor{Path: script, SHA256: fileSum(t, script), Interpreter: py, InterpreterSHA256: fileSum(t, py),
		Args: []string{"--pythonpath=" + sdkDir}, ReadOnly: []string{sdkDir, filepath.Join(root, "shared", "proto", "python")}}
	wrong := strings.Repeat("0", 64)
	badInterp, badScript := good, good
	badInterp.InterpreterSHA256 = wrong
	badScript.SHA256 = wrong
	for _, tc := range []struct {
		name   string
		ex     config.Executor
		detail string // "": the task completes
	}{
		{"pinned", good, ""},
		{"interpreter pin wrong", badInterp, "interpreter: plugin binary " + py + " has SHA-256 " + good.InterpreterSHA256 + ", config pins " + wrong},
		{"script pin wrong", badScript, "script " + script + " has SHA-256 " + good.SHA256 + ", config pins " + wrong + " ([executors.pynotes] sha256)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := openHost(t, "", func(c *config.Config) { c.Executors = map[string]config.Executor{"pynotes": tc.ex} })
			task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "pynotes",
				Spec: []byte(`{"goal":"two notes","notes":{"items":["one","two"]}}`)})
			if tc.detail == "" {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				done := waitEnd(t, h, alice, task.ID)
				wantStatus(t, done, store.StatusCompleted, "")
				if !strings.Contains(string(done.Result), `"notes": ["notes/01.md", "notes/02.md"]`) {
					t.Fatalf("result %s", done.Result)
				}
				return
			}
			var ue *plugin.UnavailableError
			if !errors.As(err, &ue) || ue.Check != "checksum" || !strings.Contains(ue.Detail, tc.detail) {
				t.Fatalf("create: %v; want unavailable (pin mismatch) with %q", err, tc.detail)
			}
		})
	}
}
