package main

import (
	"strings"
	"testing"
)

// The approver reads the command itself, escaped: the escape sequence of
// the fake daemon's prompt shows as text and never reaches the terminal.
func TestApprovalsListShowsCommandEscaped(t *testing.T) {
	sock := startFakeAPI(t)
	out, errOut, code := runCLI(t, "", "approvals", "list", "--socket", sock)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `shell.run: make test\x1b[2K`) {
		t.Errorf("the list does not show the command:\n%s", out)
	}
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("the list printed a raw escape: %q", out)
	}
}

func TestApprovalText(t *testing.T) {
	tests := []struct{ tool, prompt, want string }{
		{"shell.run", "make test", "shell.run: make test"},
		{"", "retry the interrupted effect?\nit may run twice", `retry the interrupted effect?\nit may run twice`},
		{"", `already escaped \x1b`, `already escaped \x1b`},
		{"shell.run\x1b]0;pwned\x07", "true", `shell.run\x1b]0;pwned\x07: true`},
		{"shell.run", strings.Repeat("x", maxApprovalText+1), "shell.run: " + strings.Repeat("x", maxApprovalText) + "…(+1 bytes)"},
	}
	for _, tt := range tests {
		if got := approvalText(tt.tool, tt.prompt); got != tt.want {
			t.Errorf("approvalText(%q, %q) = %q, want %q", tt.tool, tt.prompt, got, tt.want)
		}
	}
}
