package main

import (
	"strings"
	"testing"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// Plain `task status` shows the newest crashed attempt's stderr tail.
func TestTaskStatusTextShowsStderrTail(t *testing.T) {
	sock := startFakeAPI(t)
	out, errOut, code := runCLI(t, "", "task", "status", "t_aaaaaaaaaaaaaaaaaaaaaaaaaa", "--socket", sock)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "attempt 1: last stderr lines of the plugin\n  | panic: x\n") {
		t.Errorf("task status does not show the crash's stderr tail:\n%s", out)
	}
}

func TestTaskDetailStderrTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		atts   []*apipb.Attempt
		want   []string
		absent []string
	}{
		{name: "no crash", atts: []*apipb.Attempt{{Number: 1, Status: "completed"}},
			absent: []string{"last stderr lines"}},
		{name: "the newest crash only",
			atts: []*apipb.Attempt{{Number: 1, StderrTail: "old crash"}, {Number: 2, StderrTail: "line one\npanic: new crash"}, {Number: 3}},
			want: []string{"attempt 2: last stderr lines", "  | line one\n  | panic: new crash\n"}, absent: []string{"old crash"}},
		{name: "terminal escapes are neutralised",
			atts: []*apipb.Attempt{{Number: 1, StderrTail: "\x1b[2Jcleared\ttab\x07"}},
			want: []string{"  | ?[2Jcleared\ttab?\n"}, absent: []string{"\x1b", "\x07"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			writeTaskDetail(&b, &apipb.Task{Id: "t_x"}, tc.atts, 0)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(b.String(), a) {
					t.Errorf("output has %q:\n%s", a, b.String())
				}
			}
		})
	}
}

func TestExecutorLiveState(t *testing.T) {
	for check, want := range map[string]string{
		"checksum":      "pin mismatch",
		"binary":        "missing or not executable",
		"handshake":     "handshake failed",
		"start_timeout": "handshake failed",
		"disabled":      "disabled",
		"preflight":     "unavailable (preflight)",
	} {
		if got := liveState(check); got != want {
			t.Errorf("liveState(%q) = %q, want %q", check, got, want)
		}
	}
}

// What a model wrote reaches the terminal inert in every text view: a
// clipboard write (OSC 52), a title change, a clear screen, a carriage
// return and a bidirectional override in a summary, a message and a result
// are shown escaped, never obeyed. Before, task status printed them raw.
func TestModelTextIsInertInTextViews(t *testing.T) {
	hostile := "done\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b]0;pwned\x07\x1b[2J\rfake\u202eevil\x9b"
	task := &apipb.Task{Id: "t_x", Status: "failed", Message: hostile, Result: []byte(`"` + hostile + `"`)}
	atts := []*apipb.Attempt{{Number: 1, Status: "completed", Summary: hostile}}
	var detailOut strings.Builder
	writeTaskDetail(&detailOut, task, atts, 0)
	finished := detail(hostile)
	for name, out := range map[string]string{"task status": detailOut.String(), "a finished task's line": finished} {
		for _, raw := range []string{"\x1b", "\x07", "\r", "\u202e", "\u009b"} {
			if strings.Contains(out, raw) {
				t.Errorf("%s prints %q raw:\n%q", name, raw, out)
			}
		}
		if !strings.Contains(out, `\x1b]52;c;`) {
			t.Errorf("%s does not show the escape escaped:\n%s", name, out)
		}
	}
}
