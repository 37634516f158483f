package tools

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/text"
)

type shellOut struct {
	ExitCode    int    `json:"exit_code"`
	Signal      string `json:"signal"`
	Output      string `json:"output"`
	Truncated   bool   `json:"truncated"`
	OutputBytes int64  `json:"output_bytes"`
}

func runShellTool(t *testing.T, r *Registry, command string) (shellOut, Result) {
	t.Helper()
	res, err := callTool(t, t.Context(), r, ToolShellRun, map[string]any{"command": command})
	if err != nil {
		t.Fatalf("shell.run %q: %v", command, err)
	}
	var out shellOut
	decode(t, res, &out)
	return out, res
}

func TestShellRunOutputAndExitCode(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	tests := []struct {
		name    string
		command string
		code    int
		signal  string
		output  string
	}{
		{"stdout", "echo hello", 0, "", "hello\n"},
		{"stderr is merged in order", "echo out; echo err >&2; echo out2", 0, "", "out\nerr\nout2\n"},
		{"exit code", "echo failing; exit 3", 3, "", "failing\n"},
		{"killed by a signal", "kill -KILL $$", 128 + 9, "killed", ""},
		{"stdin is empty", "cat; echo done", 0, "", "done\n"},
		{"runs in the workspace", "echo x > made.txt && cat made.txt", 0, "", "x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, res := runShellTool(t, r, tt.command)
			if out.ExitCode != tt.code || out.Signal != tt.signal || out.Output != tt.output || out.Truncated {
				t.Fatalf("got %+v, want exit %d signal %q output %q", out, tt.code, tt.signal, tt.output)
			}
			if res.IsError != (tt.code != 0) {
				t.Fatalf("IsError = %v with exit code %d", res.IsError, tt.code)
			}
		})
	}
}

func TestShellRunOutputLimit(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	gen := func(n int) string { return "head -c " + strconv.Itoa(n) + " /dev/zero | tr '\\0' a" }

	out, _ := runShellTool(t, r, gen(MaxShellOutputBytes))
	if out.Truncated || len(out.Output) != MaxShellOutputBytes || out.OutputBytes != MaxShellOutputBytes {
		t.Fatalf("at the limit: truncated %v, %d bytes, output_bytes %d", out.Truncated, len(out.Output), out.OutputBytes)
	}
	out, _ = runShellTool(t, r, gen(MaxShellOutputBytes+1))
	if !out.Truncated || len(out.Output) > MaxShellOutputBytes || out.OutputBytes != MaxShellOutputBytes+1 ||
		!strings.HasPrefix(out.Output, "[output truncated: 65537 bytes in all") {
		t.Fatalf("past the limit: truncated %v, %d bytes, output_bytes %d, starts %q",
			out.Truncated, len(out.Output), out.OutputBytes, text.Clip(out.Output, 60))
	}
	// The tail is what is kept.
	out, _ = runShellTool(t, r, "seq 1 100000; echo last line >&2")
	if !out.Truncated || len(out.Output) > MaxShellOutputBytes || !strings.HasSuffix(out.Output, "99999\n100000\nlast line\n") {
		t.Fatalf("tail not kept: truncated %v, %d bytes, ends %q", out.Truncated, len(out.Output), out.Output[max(0, len(out.Output)-40):])
	}
}

func TestShellRunArgLimits(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	pad := func(n int) string { cmd := "echo ok #"; return cmd + strings.Repeat("x", n-len(cmd)) }

	out, _ := runShellTool(t, r, pad(MaxCommandBytes))
	if out.Output != "ok\n" {
		t.Fatalf("command at the limit: %+v", out)
	}
	_, err := callTool(t, t.Context(), r, ToolShellRun, map[string]any{"command": pad(MaxCommandBytes + 1)})
	wantArgError(t, err, "command", "8193 bytes", "8192")

	res, err := callTool(t, t.Context(), r, ToolShellRun, map[string]any{"command": "true", "timeout_seconds": 60})
	if err != nil || res.IsError {
		t.Fatalf("timeout_seconds at the tool's timeout: %v %+v", err, res)
	}
	for _, secs := range []int{61, 0} {
		_, err = callTool(t, t.Context(), r, ToolShellRun, map[string]any{"command": "true", "timeout_seconds": secs})
		wantArgError(t, err, "timeout_seconds", "1..60")
	}
}

// TestShellRunTimeoutKillsProcessGroup: the shell waits on a background
// grandchild that also holds the output pipe; at the timeout both die and
// Call reports ErrTimeout.
func TestShellRunTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy int            // the tool's timeout, seconds
		args   map[string]any // beyond the command
	}{
		{"policy timeout", 1, nil},
		{"timeout_seconds", 60, map[string]any{"timeout_seconds": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRegistry(t, map[string]config.Tool{ToolShellRun: {Enabled: true, Approval: config.ApprovalAlways, TimeoutSeconds: tt.policy}})
			ws := workspace(t, r)
			a := map[string]any{"command": "echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; wait"}
			for k, v := range tt.args {
				a[k] = v
			}
			_, err := callTool(t, t.Context(), r, ToolShellRun, a)
			if !errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error = %v, want ErrTimeout and no context error", err)
			}
			for _, f := range []string{"sh.pid", "bg.pid"} {
				pid := readPID(t, filepath.Join(ws, f))
				waitFor(t, f+" process to die", func() bool { return processDead(pid) })
			}
		})
	}
}

// TestShellRunCancelKillsProcessGroup cancels a running command once its
// grandchild is known to run.
func TestShellRunCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan callResult, 1)
	go func() {
		res, err := r.Call(ctx, Env{TaskID: testTask}, ToolShellRun,
			args(t, map[string]any{"command": "echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; wait"}))
		done <- callResult{res, err}
	}()
	shPID := readPID(t, filepath.Join(ws, "sh.pid"))
	bgPID := readPID(t, filepath.Join(ws, "bg.pid"))
	if processDead(bgPID) {
		t.Fatal("the grandchild is not running before the cancel")
	}
	cancel()
	got := recvResult(t, done)
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", got.err)
	}
	// Call returned after killing the group, so both are dead (or zombies
	// waiting for their reaper) already; polling only absorbs the kernel's
	// delivery of the signal.
	for _, pid := range []int{shPID, bgPID} {
		waitFor(t, "process "+strconv.Itoa(pid)+" to die", func() bool { return processDead(pid) })
	}
}

// A cancelled command is killed from the context's end, and the shell's
// exit can then be reaped before the call sees the context done: whichever
// comes first, the call fails with the cancel, never a result (the killed
// shell's 137 says nothing of what the command did).
func TestShellRunCancelledNeverAnswersAResult(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	for i := range 30 {
		pidFile := filepath.Join(ws, fmt.Sprintf("sh%d.pid", i))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan callResult, 1)
		go func() {
			res, err := r.Call(ctx, Env{TaskID: testTask}, ToolShellRun,
				args(t, map[string]any{"command": "echo $$ > " + filepath.Base(pidFile) + "; exec sleep 300"}))
			done <- callResult{res, err}
		}()
		readPID(t, pidFile)
		cancel()
		if got := recvResult(t, done); !errors.Is(got.err, context.Canceled) {
			t.Fatalf("round %d: Call = %s, %v; want context.Canceled", i, got.res.Output, got.err)
		}
	}
}

// TestShellRunBackgroundJobDoesNotOutliveCall: a command that exits while
// its background job runs on (holding the output pipe) returns, and the job
// is killed.
func TestShellRunBackgroundJobDoesNotOutliveCall(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	out, _ := runShellTool(t, r, "sleep 300 & echo $! > bg.pid; echo started")
	if out.ExitCode != 0 || out.Output != "started\n" {
		t.Fatalf("got %+v", out)
	}
	pid := readPID(t, filepath.Join(ws, "bg.pid"))
	waitFor(t, "the background job to die", func() bool { return processDead(pid) })
}

// TestShellRunEnvironment: the command sees a minimal environment, not the
// host's.
func TestShellRunEnvironment(t *testing.T) {
	const canary = "canary-value-5e1d"
	t.Setenv("TASKHOST_TOOLS_TEST_CANARY", canary)
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := runShellTool(t, r, "env; echo cwd=$(pwd -P)")
	if strings.Contains(out.Output, canary) || strings.Contains(out.Output, "TASKHOST_TOOLS_TEST_CANARY") {
		t.Fatalf("the host's environment leaked:\n%s", out.Output)
	}
	for _, want := range []string{"PATH=" + shellPath + "\n", "HOME=" + ws + "\n", "TMPDIR=" + ws + "\n", "LANG=C\n", "cwd=" + real + "\n"} {
		if !strings.Contains(out.Output, want) {
			t.Errorf("output lacks %q:\n%s", want, out.Output)
		}
	}
	for line := range strings.SplitSeq(strings.TrimSpace(out.Output), "\n") {
		name, _, _ := strings.Cut(line, "=")
		switch name {
		case "PATH", "HOME", "TMPDIR", "LANG", "PWD", "cwd", "SHLVL", "OLDPWD":
		default:
			t.Errorf("unexpected variable %q", line)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		writes    []string
		limit     int
		want      string
		truncated bool
	}{
		{"empty", nil, 100, "", false},
		{"at the limit in pieces", []string{strings.Repeat("a", 40), strings.Repeat("b", 60)}, 100, strings.Repeat("a", 40) + strings.Repeat("b", 60), false},
		{"many small writes", slices.Repeat([]string{"0123456789"}, 30), 100, "0123456789", true},
		{"one big write", []string{strings.Repeat("y", 1000) + "END"}, 100, "yEND", true},
		{"no split rune", []string{strings.Repeat("é", 100)}, 100, "é", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &tailBuffer{limit: tt.limit}
			for _, w := range tt.writes {
				b.Write([]byte(w))
			}
			got, truncated := b.text()
			if truncated != tt.truncated || !strings.HasSuffix(got, tt.want) || len(got) > tt.limit {
				t.Fatalf("text() = %q, %v", got, truncated)
			}
			if truncated {
				marker, tail, _ := strings.Cut(got, "]\n")
				if !strings.HasPrefix(marker, "[output truncated") || !utf8.ValidString(tail) {
					t.Fatalf("bad marker or tail: %q", got)
				}
			}
		})
	}
}
