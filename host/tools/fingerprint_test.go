package tools

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := Fingerprint(ToolWorkspaceWrite, json.RawMessage(`{"path":"a.txt","content":"hi","append":false}`))
	if len(base) != 64 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q is not sha256 hex", base)
	}
	same := []struct {
		name string
		tool string
		args string
	}{
		{"key order", ToolWorkspaceWrite, `{"append":false,"content":"hi","path":"a.txt"}`},
		{"whitespace", ToolWorkspaceWrite, " {\n \"content\" : \"hi\",\t\"path\":\"a.txt\", \"append\":false }\n"},
		{"string escapes", ToolWorkspaceWrite, `{"path":"a\u002etxt","content":"\u0068i","append":false}`},
	}
	for _, tt := range same {
		if got := Fingerprint(tt.tool, json.RawMessage(tt.args)); got != base {
			t.Errorf("%s: fingerprint differs", tt.name)
		}
	}
	different := []struct {
		name string
		tool string
		args string
	}{
		{"other value", ToolWorkspaceWrite, `{"path":"a.txt","content":"ho","append":false}`},
		{"other key", ToolWorkspaceWrite, `{"path":"a.txt","content":"hi","append":true}`},
		{"missing key", ToolWorkspaceWrite, `{"path":"a.txt","content":"hi"}`},
		{"other tool", ToolWorkspaceRead, `{"path":"a.txt","content":"hi","append":false}`},
		{"nested order matters in arrays", ToolWorkspaceWrite, `{"path":["a.txt"],"content":"hi","append":false}`},
		{"invalid JSON", ToolWorkspaceWrite, `{"path":"a.txt","content":"hi","append":false`},
	}
	seen := map[string]string{base: "base"}
	for _, tt := range different {
		got := Fingerprint(tt.tool, json.RawMessage(tt.args))
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: same fingerprint as %s", tt.name, prev)
		}
		seen[got] = tt.name
	}
	// Nested objects are canonicalised too; empty and null are {}.
	if Fingerprint("x", json.RawMessage(`{"a":{"y":1,"x":2}}`)) != Fingerprint("x", json.RawMessage(`{"a":{"x":2,"y":1}}`)) {
		t.Error("nested key order changes the fingerprint")
	}
	if e := Fingerprint("x", nil); e != Fingerprint("x", json.RawMessage(`null`)) || e != Fingerprint("x", json.RawMessage(` {} `)) {
		t.Error("empty, null and {} differ")
	}
	// The name and the arguments cannot run into each other.
	if Fingerprint("ab", json.RawMessage(`{}`)) == Fingerprint("a", json.RawMessage(`b{}`)) {
		t.Error("name/argument boundary is ambiguous")
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	const canary = "s3cr3t-canary"
	tests := []struct {
		name string
		tool string
		args string
		want string
	}{
		{"shell", ToolShellRun, `{"command":"echo ` + canary + `"}`, "shell.run{command:18B}"},
		{"sorted keys and sizes", ToolWorkspaceWrite, `{"path":"` + canary + `","content":"` + strings.Repeat("x", 3000) + `","append":true}`,
			"workspace.write{append:4B,content:2KiB,path:13B}"},
		{"unknown keys are only counted", ToolShellRun, `{"command":"x","` + canary + `":"` + canary + `"}`, "shell.run{command:1B,+1 unknown}"},
		{"empty", ToolWorkspaceList, ``, "workspace.list{}"},
		{"null", ToolWorkspaceList, `null`, "workspace.list{}"},
		{"invalid", ToolShellRun, `"` + canary + `"`, "shell.run(invalid:15B)"},
		{"unknown tool name is sanitised", "evil tool\n", `{"k":"` + canary + `"}`, "evil?tool?{+1 unknown}"},
		{"number", ToolTimeSleep, `{"seconds":12.5}`, "time.sleep{seconds:4B}"},
		{"megabytes", ToolWorkspaceWrite, `{"content":"` + strings.Repeat("x", 1<<20) + `"}`, "workspace.write{content:1MiB}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.tool, json.RawMessage(tt.args))
			if got != tt.want {
				t.Fatalf("Summarize = %q, want %q", got, tt.want)
			}
			if strings.Contains(got, canary) {
				t.Fatalf("summary %q contains an argument value", got)
			}
		})
	}
	// Bounded however long the name and however many keys.
	long := Summarize(strings.Repeat("n", 500), json.RawMessage(`{"a":1,"b":2}`))
	many := Summarize(ToolWorkspaceRead, json.RawMessage(`{"path":"`+strings.Repeat("p", 1<<20)+`","offset":123456789012,"limit":262144}`))
	for _, s := range []string{long, many} {
		if len(s) > MaxSummaryBytes {
			t.Errorf("summary of %d bytes: %q", len(s), s)
		}
	}
}
