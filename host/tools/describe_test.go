package tools

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func shellArgs(t *testing.T, command string) json.RawMessage {
	t.Helper()
	return args(t, map[string]any{"command": command})
}

func TestDescribeShellRun(t *testing.T) {
	t.Parallel()
	at := strings.Repeat("a", MaxDescribeBytes)
	tests := []struct {
		name    string
		command string
		want    string
	}{
		{"plain", "echo hi > notes.md", "echo hi > notes.md"},
		{"quotes kept", `printf '%s\n' "x"`, `printf '%s\\n' "x"`},
		{"newline", "true\nrm -rf /", `true\nrm -rf /`},
		{"ANSI escape", "echo \x1b[2K\x1b[1Atrue", `echo \x1b[2K\x1b[1Atrue`},
		{"carriage return hides nothing", "rm -rf ~\rtrue        ", `rm -rf ~\rtrue        `},
		{"bidi override", "echo \u202egnp.exe", `echo \u202egnp.exe`},
		// JSON decoding already turns invalid UTF-8 into U+FFFD.
		{"invalid UTF-8", "echo \xff", "echo \ufffd"},
		{"DEL and C1", "a\x7fb\u0085c", `a\x7fb\u0085c`},
		{"non-ASCII printable kept", "echo héllo wörld ✓", "echo héllo wörld ✓"},
		{"at the bound", at, at},
		{"one past the bound", at + "b", at + "…(+1 bytes)"},
		{"far past the bound", at + strings.Repeat("b", 1000), at + "…(+1000 bytes)"},
		// An escape that does not fit is cut whole: never half of "\x1b".
		{"escape at the bound", at[:MaxDescribeBytes-2] + "\x1b", at[:MaxDescribeBytes-2] + "…(+1 bytes)"},
		{"rune not split", at[:MaxDescribeBytes-1] + "é", at[:MaxDescribeBytes-1] + "…(+2 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Describe(ToolShellRun, shellArgs(t, tt.command))
			if got != tt.want {
				t.Fatalf("Describe = %q\nwant       %q", got, tt.want)
			}
			wantDisplaySafe(t, got)
			text, _, _ := strings.Cut(got, "…(+")
			if len(text) > MaxDescribeBytes {
				t.Fatalf("%d bytes before the marker; the bound is %d", len(text), MaxDescribeBytes)
			}
		})
	}
}

// The command's worst case, every byte escaped to four, stays bounded.
func TestDescribeBoundWorstCase(t *testing.T) {
	t.Parallel()
	got := Describe(ToolShellRun, shellArgs(t, strings.Repeat("\x1b", MaxCommandBytes)))
	text, marker, ok := strings.Cut(got, "…(+")
	if !ok || len(text) != MaxDescribeBytes || marker != "8064 bytes)" {
		t.Fatalf("Describe of %d ESC bytes: %d bytes, marker %q", MaxCommandBytes, len(text), marker)
	}
}

func TestDescribeOtherTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, tool, args, want string
	}{
		{"write", ToolWorkspaceWrite, `{ "path":"notes.md", "content":"a\u001b[31mb\n" }`, `{"content":"a\u001b[31mb\n","path":"notes.md"}`},
		{"raw bidi in JSON is escaped", ToolWorkspaceRead, "{\"path\":\"a\u202eb\"}", `{"path":"a\u202eb"}`},
		{"no arguments", ToolWorkspaceList, ``, `{}`},
		{"shell.run without a command", ToolShellRun, `{}`, `shell.run{}`},
		{"unknown tool", "evil.tool\x1b", `{"x":"\u001b"}`, `evil.tool?{+1 unknown}`},
		{"invalid JSON", ToolWorkspaceRead, `{"path":`, `workspace.read(invalid:8B)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Describe(tt.tool, json.RawMessage(tt.args))
			if got != tt.want {
				t.Fatalf("Describe = %q, want %q", got, tt.want)
			}
			wantDisplaySafe(t, got)
		})
	}
}

func TestVisible(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":            "",
		`a\nb`:        `a\\nb`,
		"a\nb":        `a\nb`,
		"\x00\x1b\t":  `\x00\x1b\t`,
		"\U000e0041":  `\U000e0041`, // a tag character: invisible
		"plain text!": "plain text!",
		"a\xffb\xc3":  `a\xffb\xc3`,
	} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}

// wantDisplaySafe fails if s could do anything on a terminal but show.
func wantDisplaySafe(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("%q is not valid UTF-8", s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			t.Fatalf("%q holds the non-printable rune %U", s, r)
		}
	}
}

func FuzzDescribe(f *testing.F) {
	f.Add("echo \x1b[31m\n", true)
	f.Add(strings.Repeat("\xff", 600), false)
	f.Fuzz(func(t *testing.T, command string, shell bool) {
		tool := ToolWorkspaceWrite
		raw, _ := json.Marshal(map[string]string{"path": "p", "content": command})
		if shell {
			tool = ToolShellRun
			raw, _ = json.Marshal(map[string]string{"command": command})
		}
		got := Describe(tool, raw)
		wantDisplaySafe(t, got)
		if text, _, _ := strings.Cut(got, "…(+"); len(text) > MaxDescribeBytes {
			t.Fatalf("%d bytes before the marker", len(text))
		}
	})
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{`already \n escaped`, 100, `already \n escaped`},
		{"line one\nline two\x1b[0m", 100, `line one\nline two\x1b[0m`},
		{"abcd", 4, "abcd"},
		{"abcde", 4, "abcd…(+1 bytes)"},
		{"\U0010fffd\U0010fffd", 12, `\U0010fffd…(+4 bytes)`},
	}
	for _, tt := range tests {
		got := Printable(tt.in, tt.limit)
		if got != tt.want {
			t.Errorf("Printable(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
		wantDisplaySafe(t, got)
		if again := Printable(got, len(got)); again != got {
			t.Errorf("Printable is not idempotent: %q became %q", got, again)
		}
	}
}

func TestDescribeForApproval(t *testing.T) {
	args := func(cmd string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"command": cmd})
		return b
	}
	at := strings.Repeat("a", MaxApprovalCommandBytes)
	for _, c := range []struct {
		name, command string
		ok            bool
	}{
		{"at the bound", at, true},
		{"one past", at + "a", false},
		{"escaping counts", strings.Repeat("\n", MaxApprovalCommandBytes/2+1), false},
		{"short", "ls -l", true},
	} {
		desc, n, ok := DescribeForApproval(ToolShellRun, args(c.command))
		if ok != c.ok || n != len(Visible(c.command)) {
			t.Errorf("%s: ok %v, length %d; want ok %v, length %d", c.name, ok, n, c.ok, len(Visible(c.command)))
		}
		if ok && desc != Visible(c.command) {
			t.Errorf("%s: shown %q, want the whole command", c.name, desc)
		}
	}
	// Other tools are described as before.
	if desc, _, ok := DescribeForApproval(ToolWorkspaceRead, json.RawMessage(`{"path":"a"}`)); !ok || desc != Describe(ToolWorkspaceRead, json.RawMessage(`{"path":"a"}`)) {
		t.Errorf("workspace.read: %q, %v", desc, ok)
	}
}
