package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// keyedCall runs tool name with args under idempotency key key.
func keyedCall(t *testing.T, r *Registry, name, key string, a any) (Result, error) {
	t.Helper()
	return r.Call(context.Background(), Env{TaskID: testTask, IdempotencyKey: key}, name, args(t, a))
}

// A keyed workspace.write has the effect of one however often it is
// repeated — an append included, which is not idempotent by content — and
// says when it did nothing; its key outlives other writes of the file
// (keyed or not) for the last 16 keyed writes. A key reused for another
// write, a key over the bound, and a key on a tool that does not honour
// one are refused, naming the argument.
func TestWriteHonoursIdempotencyKey(t *testing.T) {
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	line := map[string]any{"path": "log.txt", "content": "one line\n", "append": true}
	read := func() string {
		t.Helper()
		b, _ := os.ReadFile(filepath.Join(ws, "log.txt"))
		return string(b)
	}
	for i, want := range []string{`{"written":9}`, `{"written":9,"deduplicated":true}`, `{"written":9,"deduplicated":true}`} {
		res, err := keyedCall(t, r, ToolWorkspaceWrite, "k1", line)
		if err != nil || res.Output != want {
			t.Fatalf("call %d: %+v, %v; want %s", i+1, res, err, want)
		}
	}
	if got := read(); got != "one line\n" {
		t.Fatalf("after three keyed appends: %q", got)
	}
	// Other writes in between, one unkeyed: k1 is still remembered.
	if _, err := r.Call(context.Background(), Env{TaskID: testTask}, ToolWorkspaceWrite, args(t, map[string]any{"path": "log.txt", "content": "two\n", "append": true})); err != nil {
		t.Fatal(err)
	}
	if _, err := keyedCall(t, r, ToolWorkspaceWrite, "k2", map[string]any{"path": "log.txt", "content": "three\n", "append": true}); err != nil {
		t.Fatal(err)
	}
	if res, err := keyedCall(t, r, ToolWorkspaceWrite, "k1", line); err != nil || !strings.Contains(res.Output, "deduplicated") {
		t.Fatalf("k1 after other writes: %+v, %v", res, err)
	}
	if got := read(); got != "one line\ntwo\nthree\n" {
		t.Fatalf("file %q", got)
	}
	// The file keeps its last 16 keys: the 17th write after k1 forgets it.
	for i := range keysKept {
		if _, err := keyedCall(t, r, ToolWorkspaceWrite, "n"+string(rune('a'+i)), map[string]any{"path": "log.txt", "content": "x", "append": true}); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := keyedCall(t, r, ToolWorkspaceWrite, "k1", line); err != nil || strings.Contains(res.Output, "deduplicated") {
		t.Fatalf("k1 past the 16 kept keys: %+v, %v; want it applied again", res, err)
	}
	b := make([]byte, 4096)
	n, err := unix.Getxattr(filepath.Join(ws, "log.txt"), keysXattr, b)
	if err != nil || n > maxKeysXattr || strings.Count(string(b[:n]), "\n") != keysKept-1 {
		t.Fatalf("the keys attribute: %d bytes, %v: %q", n, err, b[:n])
	}

	for _, tc := range []struct {
		name, tool, key string
		args            map[string]any
		want            string
	}{
		{"key reused for another write", ToolWorkspaceWrite, "k1", map[string]any{"path": "log.txt", "content": "other\n", "append": true}, `argument "idempotency_key": was already used for a different write`},
		{"key at the bound", ToolWorkspaceWrite, strings.Repeat("k", MaxIdempotencyKeyBytes), map[string]any{"path": "b.txt", "content": "x"}, ""},
		{"key past the bound", ToolWorkspaceWrite, strings.Repeat("k", MaxIdempotencyKeyBytes+1), map[string]any{"path": "b.txt", "content": "x"}, `argument "idempotency_key": is 129 bytes; the limit is 128`},
		{"shell.run", ToolShellRun, "k3", map[string]any{"command": "echo hi >> log.txt"}, `shell.run: argument "idempotency_key": this tool does not honour an idempotency key`},
		{"workspace.read", ToolWorkspaceRead, "k4", map[string]any{"path": "log.txt"}, `does not honour an idempotency key`},
	} {
		before := read()
		_, err := keyedCall(t, r, tc.tool, tc.key, tc.args)
		var ae *ArgError
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an ArgError %q", tc.name, err, tc.want)
		}
		if read() != before {
			t.Errorf("%s: the refused call wrote", tc.name)
		}
	}
	if !r.HonoursKey(ToolWorkspaceWrite) || r.HonoursKey(ToolShellRun) || r.HonoursKey("nope") {
		t.Error("HonoursKey")
	}
}
