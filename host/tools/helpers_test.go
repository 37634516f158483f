package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/internal/text"
)

// testTask is the task id most tests run as.
const testTask = "task_1"

// newTestRegistry returns a registry with the default policies, changed by
// overrides, whose workspace root is a fresh temporary directory.
func newTestRegistry(t *testing.T, overrides map[string]config.Tool) *Registry {
	t.Helper()
	cfg := config.Default().Tools
	for name, tool := range overrides {
		cfg[name] = tool
	}
	r, err := NewRegistry(cfg, filepath.Join(t.TempDir(), "workspaces"))
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// workspace returns the test task's workspace, created.
func workspace(t *testing.T, r *Registry) string {
	t.Helper()
	ws, err := r.Workspace(testTask)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	return ws
}

// args encodes a tool's arguments.
func args(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func callTool(t *testing.T, ctx context.Context, r *Registry, name string, a any) (Result, error) {
	t.Helper()
	raw, ok := a.(json.RawMessage)
	if !ok {
		raw = args(t, a)
	}
	return r.Call(ctx, Env{TaskID: testTask}, name, raw)
}

// mustCall calls a tool that must succeed (IsError false) and decodes its
// output into out, if out is not nil.
func mustCall(t *testing.T, r *Registry, name string, a any, out any) Result {
	t.Helper()
	res, err := callTool(t, t.Context(), r, name, a)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: IsError result: %s", name, res.Output)
	}
	decode(t, res, out)
	return res
}

func decode(t *testing.T, res Result, out any) {
	t.Helper()
	if out == nil {
		return
	}
	if err := json.Unmarshal([]byte(res.Output), out); err != nil {
		t.Fatalf("output %q is not the expected JSON: %v", text.Clip(res.Output, 200), err)
	}
}

// wantArgError asserts err is an *ArgError about field whose message
// contains each of contains.
func wantArgError(t *testing.T, err error, field string, contains ...string) {
	t.Helper()
	ae, ok := errors.AsType[*ArgError](err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *ArgError", err, err)
	}
	if ae.Field != field {
		t.Fatalf("ArgError field = %q, want %q (%v)", ae.Field, field, err)
	}
	for _, s := range contains {
		if !strings.Contains(ae.Message, s) {
			t.Fatalf("ArgError message %q does not contain %q", ae.Message, s)
		}
	}
}

// wantErrorResult asserts a call ran and reports a failure containing msg.
func wantErrorResult(t *testing.T, res Result, err error, msg string) {
	t.Helper()
	if err != nil {
		t.Fatalf("got error %v, want an IsError result", err)
	}
	if !res.IsError || !strings.Contains(res.Output, msg) {
		t.Fatalf("result %+v, want IsError containing %q", res, msg)
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline. It is for waiting on another process, never for ordering
// goroutines of the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 30*time.Second, what, cond)
}

// processDead reports whether pid no longer runs: it is gone or a zombie
// (whose reaping is up to its new parent, which may be a PID 1 that never
// reaps).
func processDead(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	state := s[i+2]
	return state == 'Z' || state == 'X'
}

// readPID waits for a file the command under test writes with a pid.
func readPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	waitFor(t, "pid file "+filepath.Base(file), func() bool {
		b, err := testwait.ReadLive(file)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// result waits for a Call running in another goroutine.
type callResult struct {
	res Result
	err error
}

func recvResult(t *testing.T, ch <-chan callResult) callResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("Call did not return")
		return callResult{}
	}
}
