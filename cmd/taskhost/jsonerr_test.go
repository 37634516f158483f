package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestWantsJSON(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"task", "status", "t_1", "--json"}, true},
		{[]string{"inspect", "-json", "t_1"}, true},
		{[]string{"task", "list", "--json=true"}, true},
		{[]string{"task", "list", "--json=false"}, false},
		{[]string{"task", "list", "--json=maybe"}, false},
		{[]string{"task", "create", "--goal", "--json"}, true}, // the parser decides; an error is JSON either way
		{[]string{"task", "create", "--", "--json"}, false},
		{[]string{"task", "create", "--jsonx"}, false},
		{[]string{"json"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := wantsJSON(tt.args); got != tt.want {
			t.Errorf("wantsJSON(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// Every command and subcommand reports a usage mistake under --json as the
// one documented object on stderr, nothing on stdout; without --json as
// text.
func TestEveryCommandJSONUsageError(t *testing.T) {
	var paths [][]string
	for _, c := range commands() {
		paths = append(paths, []string{c.name})
	}
	for _, c := range taskCommands() {
		paths = append(paths, []string{"task", c.name})
	}
	paths = append(paths, []string{"approvals", "list"}, []string{"token", "hash"})
	for _, p := range paths {
		name := strings.Join(p, " ")
		t.Run(name, func(t *testing.T) {
			args := append(append([]string{}, p...), "--json", "--no-such-flag")
			stdout, stderr, code := runCLI(t, "", args...)
			if code != exitUsage || stdout != "" {
				t.Fatalf("exit %d, stdout %q", code, stdout)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			var v errorView
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &v) != nil {
				t.Fatalf("stderr is not one JSON object:\n%s", stderr)
			}
			// The first mistake is named: -no-such-flag, or -json itself
			// where the command has no JSON output, or the unknown
			// subcommand.
			if v.Error.Code != "usage" || v.ExitCode != exitUsage || !strings.HasPrefix(v.Error.Message, p[0]) && !strings.Contains(v.Error.Message, "no-such-flag") {
				t.Errorf("error object %+v", v)
			}
			_, plain, code := runCLI(t, "", append(append([]string{}, p...), "--no-such-flag")...)
			if code != exitUsage || strings.HasPrefix(plain, "{") || !strings.Contains(plain, "no-such-flag") {
				t.Errorf("without --json: exit %d, stderr %q", code, plain)
			}
		})
	}
}

// Flags may follow the arguments, and a local failure (no store here) is
// JSON too.
func TestInspectFlagsAfterTheID(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runCLI(t, "", "inspect", "t_missing", "--json", "--data-dir", dir)
	var v errorView
	if code != exitUnavailable || stdout != "" || json.Unmarshal([]byte(strings.TrimSpace(stderr)), &v) != nil {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if v.Error.Code != "unavailable" || !strings.Contains(v.Error.Message, "does not exist") {
		t.Errorf("error object %+v", v)
	}
	_, stderr, code = runCLI(t, "", "inspect", "a", "b", "--json")
	if code != exitUsage || !strings.Contains(stderr, `too many arguments: a b`) {
		t.Errorf("two ids: exit %d, stderr %q", code, stderr)
	}
}

func TestEscapesAllowed(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"TERM": "xterm-256color"}, true},
		{map[string]string{"TERM": "xterm", "NO_COLOR": "1"}, false},
		{map[string]string{"NO_COLOR": "0"}, false}, // any value, per no-color.org
		{map[string]string{"TERM": "dumb"}, false},
	}
	for _, tt := range tests {
		if got := escapesAllowed(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("escapesAllowed(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

// --no-progress goes with every --watch: create, cancel, resume and watch
// take it (a refused flag would fail the command before any call, exit 2).
func TestNoProgressWithEveryWatch(t *testing.T) {
	for _, sub := range []string{"create", "cancel", "resume", "watch"} {
		spec := describeCommand(context.Background(), "task", sub)
		if !slices.Contains(spec.flags, "--no-progress") {
			t.Errorf("task %s: flags %v lack --no-progress", sub, spec.flags)
		}
	}
}
