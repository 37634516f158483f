package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/json")

// runCLI runs the taskhost command line in-process.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = dispatch(ctx, &env{stdout: &o, stderr: &e, stdin: strings.NewReader(stdin)}, args)
	return o.String(), e.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	if want, ok := goldenFile(t, filepath.Join("testdata", "json", name), got); !ok {
		t.Errorf("%s differs from the golden file (a --json shape changed: update docs/cli.md, then go test -update)\n got: %s\nwant: %s", name, got, want)
	}
}

// goldenFile compares got with the file at path, or writes it there under
// -update; ok is false when they differ.
func goldenFile(t *testing.T, path, got string) (want string, ok bool) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return got, true
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	return string(data), got == string(data)
}

// TestJSONShapes runs every client command with --json against an API
// with fixed answers and compares the output with the golden files that
// docs/cli.md documents.
func TestJSONShapes(t *testing.T) {
	sock := startFakeAPI(t)
	for _, c := range jsonCases() {
		t.Run(c.golden, func(t *testing.T) {
			args := append(c.args[:len(c.args):len(c.args)], "--json", "--socket", sock)
			out, errOut, code := runCLI(t, c.stdin, args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out, errOut)
			}
			got := out
			if c.stderr {
				got = errOut
				if out != "" {
					t.Errorf("an error printed to stdout: %q", out)
				}
			}
			for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
				if !json.Valid([]byte(line)) {
					t.Fatalf("not a JSON line: %q", line)
				}
			}
			golden(t, c.golden, got)
		})
	}
	t.Run("token_hash.json", func(t *testing.T) {
		out, errOut, code := runCLI(t, "  a-token-of-some-length\n", "token", "hash", "--json")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		golden(t, "token_hash.json", out)
	})
}

// jsonCase is one client command run with --json against the fake API: its
// output is compared with testdata/json/GOLDEN, and its shape is pinned in
// testdata/cli_surface.golden.
type jsonCase struct {
	golden string
	args   []string
	stdin  string
	code   int
	stderr bool // the JSON is on stderr (an error)
}

func jsonCases() []jsonCase {
	const id = "t_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	return []jsonCase{
		{"task_create.json", []string{"task", "create", "--goal", "count to three", "--max-steps", "5"}, "", exitOK, false},
		{"task_list.json", []string{"task", "list"}, "", exitOK, false},
		{"task_status.json", []string{"task", "status", id}, "", exitOK, false},
		{"task_cancel.json", []string{"task", "cancel", id}, "", exitOK, false},
		{"task_resume.json", []string{"task", "resume", id}, "", exitOK, false},
		{"task_resolve_effect.json", []string{"task", "resolve-effect", id, "1/2", "--abandon"}, "", exitOK, false},
		{"error_resolve_effect_conflict.json", []string{"task", "resolve-effect", id, "1/1", "--retry"}, "", exitConflict, true},
		{"task_watch.jsonl", []string{"task", "watch", id}, "", exitOK, false},
		{"approvals_list.json", []string{"approvals", "list"}, "", exitOK, false},
		{"approve.json", []string{"approve", "a_cccccccccccccccccccccccccc"}, "", exitOK, false},
		{"reject.json", []string{"reject", "a_cccccccccccccccccccccccccc"}, "", exitOK, false},
		{"executors.json", []string{"executors"}, "", exitOK, false},
		{"hosts.json", []string{"hosts"}, "", exitOK, false},
		{"error_not_found.json", []string{"task", "status", "t_missing"}, "", exitNotFound, true},
		{"error_invalid_argument.json", []string{"task", "create", "--goal", "g", "--max-steps", "500"}, "", exitUsage, true},
		{"error_conflict.json", []string{"task", "cancel", "t_done"}, "", exitConflict, true},
		{"error_executor_unavailable.json", []string{"task", "create", "--goal", "g", "--executor", "machinespirit"}, "", exitUnavailable, true},
		{"error_usage.json", []string{"task", "list", "--limit", "0"}, "", exitUsage, true},
	}
}

func TestNoDaemon(t *testing.T) {
	dir := t.TempDir()
	_, errOut, code := runCLI(t, "", "task", "list", "--data-dir", dir)
	if code != exitUnavailable || !strings.Contains(errOut, "taskhost serve --data-dir "+dir) {
		t.Fatalf("exit %d, stderr %q: want 5 and a hint to start the daemon", code, errOut)
	}
	_, errOut, code = runCLI(t, "", "executors", "--data-dir", dir, "--json")
	var v errorView
	if code != exitUnavailable || json.Unmarshal([]byte(errOut), &v) != nil || v.Error.Code != "unavailable" || v.ExitCode != exitUnavailable {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	sock := startFakeAPI(t)
	cases := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"nonsense"}, `unknown command "nonsense"`},
		{[]string{"task"}, "Usage: taskhost task COMMAND"},
		{[]string{"task", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"task", "create"}, "give --goal TEXT or --spec-file FILE"},
		{[]string{"task", "create", "--goal", "g", "--max-steps", "many"}, `invalid value "many"`},
		{[]string{"task", "create", "--goal", "g", "--max-steps", "-1"}, "--max-steps must not be negative"},
		{[]string{"task", "create", "--goal", "g", "--spec-file", "/nonexistent/spec.json"}, "--spec-file"},
		{[]string{"task", "create", "--goal", "g", "extra"}, `unexpected argument "extra"`},
		{[]string{"task", "create", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"task", "status"}, "missing argument"},
		{[]string{"task", "status", "a", "b"}, "too many arguments"},
		// Invalid UTF-8 ids exited 5, as if the daemon were down.
		{[]string{"task", "status", "t_\xff\xfe"}, "is not valid UTF-8"},
		{[]string{"task", "cancel", "t_\xc3"}, "is not valid UTF-8"},
		{[]string{"task", "create", "--goal", "g\xff"}, "is not valid UTF-8"},
		{[]string{"task", "status", "--attempts", "0", "t_x"}, "--attempts must be 1..500"},
		{[]string{"task", "list", "--limit", "0"}, "--limit must be 1..100000"},
		{[]string{"task", "watch"}, "missing argument"},
		{[]string{"task", "watch", "--reconnect-timeout", "-1s", "t_x"}, "must not be negative"},
		{[]string{"task", "cancel"}, "missing argument"},
		{[]string{"task", "resume", "a", "b"}, "too many arguments"},
		{[]string{"approvals"}, "Usage: taskhost approvals COMMAND"},
		{[]string{"approve"}, "missing argument"},
		{[]string{"reject", "a", "b"}, "too many arguments"},
		{[]string{"executors", "x"}, `unexpected argument "x"`},
		{[]string{"serve", "--log-format", "xml"}, "--log-format must be text or json"},
		{[]string{"serve", "--log-level", "loud"}, "--log-level must be"},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"demo", "--bogus"}, "flag provided but not defined"},
		{[]string{"backup"}, "missing argument"},
		{[]string{"token"}, "Usage: taskhost token COMMAND"},
		{[]string{"token", "hash", "x"}, `unexpected argument "x"`},
		{[]string{"task", "list", "--address", "127.0.0.1:1"}, "--address needs a token"},
	}
	t.Setenv("TASKHOST_TOKEN", "")
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			args := c.args
			if len(args) > 1 && args[0] != "serve" && args[0] != "demo" && args[0] != "token" && args[0] != "backup" {
				args = append(args[:len(args):len(args)], "--socket", sock)
			}
			out, errOut, code := runCLI(t, "", args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitUsage, out, errOut)
			}
			if !strings.Contains(errOut, c.want) {
				t.Fatalf("stderr does not say %q:\n%s", c.want, errOut)
			}
		})
	}
	if _, errOut, code := runCLI(t, "short\n", "token", "hash"); code != exitUsage || !strings.Contains(errOut, "at least 16") {
		t.Fatalf("a short token: exit %d, %s", code, errOut)
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"task", "--help"}, {"task", "create", "--help"}, {"serve", "-h"}, {"approvals", "help"}} {
		out, errOut, code := runCLI(t, "", args...)
		if code != exitOK || !strings.Contains(out+errOut, "Usage") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

func TestTextOutput(t *testing.T) {
	sock := startFakeAPI(t)
	const id = "t_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	out, _, code := runCLI(t, "", "task", "status", id, "--socket", sock)
	for _, want := range []string{"status    completed", "steps 3/20  tools 2/50  models 5/100  depth 0/1  wall 2.5s/1800s", "signal killed", "report ready"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("task status lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	out, _, code = runCLI(t, "", "task", "watch", id, "--socket", sock)
	if code != exitOK || !strings.Contains(out, "step.completed") || !strings.Contains(out, "task "+id+" completed") {
		t.Errorf("task watch (exit %d):\n%s", code, out)
	}
	if strings.Contains(out, "\r") {
		t.Errorf("a progress line was drawn on a non-terminal:\n%q", out)
	}
	out, _, code = runCLI(t, "", "executors", "--socket", sock)
	if code != exitOK || !strings.Contains(out, "sha256:9f86d081884c") || !strings.Contains(out, "disabled: machinespirit is disabled") {
		t.Errorf("executors (exit %d):\n%s", code, out)
	}
}

func TestProgressLineFitsTheTerminal(t *testing.T) {
	w := &watchView{width: 40, id: "t_aaaaaaaaaaaaaaaaaaaaaaaaaa", status: "running", steps: "1/20", tools: "0/50", models: "0/100", wall: "0/1800", start: time.Now()}
	if l := w.progressLine(); len(l) != 39 {
		t.Fatalf("progress line of %d columns on a 40-column terminal: %q", len(l), l)
	}
	w.width = 0
	if l := w.progressLine(); !strings.Contains(l, "steps 1/20 | tools 0/50 | models 0/100 | wall 0/1800s") {
		t.Fatalf("progress line %q", l)
	}
}

func TestFailedRuntimePreflightIsUnavailable(t *testing.T) {
	x := executorJSON(&apipb.Executor{Kind: "machinespirit", Available: true, Runtime: map[string]string{"preflight": "failed: swipl 9.2.0, want 9.0.4"}})
	if x.Preflight.OK || x.Preflight.Check != "runtime" || !strings.Contains(x.Preflight.Detail, "9.0.4") {
		t.Fatalf("preflight %+v", x.Preflight)
	}
	if x := executorJSON(&apipb.Executor{Kind: "legacy", Available: true, Runtime: map[string]string{"preflight": "ok"}}); !x.Preflight.OK {
		t.Fatalf("preflight %+v", x.Preflight)
	}
}

// resolve-effect refuses, before dialling, what is not one effect and one
// resolution: exit 2 naming the argument.
func TestResolveEffectUsage(t *testing.T) {
	const id = "t_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{id, "1/1"}, "one of --retry or --abandon"},
		{[]string{id, "1/1", "--retry", "--abandon"}, "one of --retry or --abandon"},
		{[]string{id, "1", "--retry"}, "want ATTEMPT/SEQ"},
		{[]string{id, "0/1", "--retry"}, "want ATTEMPT/SEQ"},
		{[]string{id, "1/x", "--abandon"}, "want ATTEMPT/SEQ"},
		{[]string{id, "1/-1", "--abandon"}, "want ATTEMPT/SEQ"},
	} {
		args := append([]string{"task", "resolve-effect"}, c.args...)
		args = append(args, "--socket", "/nonexistent/socket")
		_, errOut, code := runCLI(t, "", args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d saying %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}
