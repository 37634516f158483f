package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// blockedCommand is a taskhost process whose stdin is a pipe nobody writes:
// a read of it blocks until the process gives up on it.
type blockedCommand struct {
	cmd    *exec.Cmd
	stdout lockedBuffer
	stderr lockedBuffer
	done   chan struct{}
}

func startBlocked(t *testing.T, args ...string) *blockedCommand {
	t.Helper()
	b := &blockedCommand{cmd: exec.Command(filepath.Join(binDir, "taskhost"), args...), done: make(chan struct{})}
	stdin, err := b.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close() })
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// signalAndWait sends sig and returns the exit code and how long the
// process took to exit; it fails the test past limit.
func (b *blockedCommand) signalAndWait(t *testing.T, sig syscall.Signal, limit time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(limit):
		t.Fatalf("still running %s after %v; stderr:\n%s", limit, sig, b.stderr.String())
	}
	return b.cmd.ProcessState.ExitCode(), time.Since(start)
}

// Client commands blocked on input or on a watch end promptly on SIGTERM
// and SIGINT, with exit 130.
func TestClientCommandsEndOnSignal(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, "")
	id := createTask(t, d, work, map[string]any{"goal": "wait", "testexec": map[string]any{"steps": 1, "request_approval": true}})

	cases := []struct {
		name string
		sig  syscall.Signal
		args []string
		// ready reports when the command is blocked where the test wants it.
		ready func(b *blockedCommand) bool
	}{
		{"watch SIGTERM", syscall.SIGTERM, []string{"task", "watch", id, "--data-dir", data, "--json"},
			func(b *blockedCommand) bool { return strings.Contains(b.stdout.String(), "task.waiting_approval") }},
		{"watch SIGINT", syscall.SIGINT, []string{"task", "watch", id, "--data-dir", data, "--json"},
			func(b *blockedCommand) bool { return strings.Contains(b.stdout.String(), "task.waiting_approval") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := startBlocked(t, c.args...)
			testwait.Until(t, 30*time.Second, "the command to block", func() bool { return c.ready(b) })
			code, took := b.signalAndWait(t, c.sig, 5*time.Second)
			if code != 130 {
				t.Fatalf("exit %d after %v, want 130; stderr:\n%s", code, c.sig, b.stderr.String())
			}
			t.Logf("%s: exit %d %v after the signal", c.name, code, took.Round(time.Millisecond))
		})
	}
	// The task itself is untouched by its watchers going away.
	out, _, _ := d.cli(t, "task", "status", id)
	if !strings.Contains(out, "waiting_approval") {
		t.Fatalf("the task changed when its watchers were stopped:\n%s", out)
	}
}

// --spec-file and --file take only regular files, bounded: /dev/zero, a
// FIFO and a directory are refused at once (exit 2) naming the flag, and
// the size limit is enforced while reading.
func TestInputFilesAreRegularAndBounded(t *testing.T) {
	t.Parallel()
	work := testwait.ShortTempDir(t)
	fifo := filepath.Join(work, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(work, "big.json")
	if err := os.WriteFile(big, bytes.Repeat([]byte(" "), 64<<10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"task", "create", "--spec-file", "/dev/zero"}, "--spec-file /dev/zero: is a character device, not a regular file"},
		{[]string{"task", "create", "--spec-file", fifo}, "is a FIFO, not a regular file"},
		{[]string{"task", "create", "--spec-file", work}, "is a directory, not a regular file"},
		{[]string{"task", "create", "--spec-file", big}, "is 65537 bytes, the limit is 65536"},
		{[]string{"run", "--spec-file", "/dev/zero"}, "--spec-file /dev/zero: is a character device"},
		{[]string{"task", "create", "--goal", "g", "--file", "/dev/zero"}, "--file /dev/zero: is a character device"},
		{[]string{"task", "create", "--goal", "g", "--file", fifo}, "is a FIFO"},
		{[]string{"task", "create", "--goal", "g", "--address", "127.0.0.1:1", "--token-file", fifo}, "--token-file " + fifo + ": is a FIFO"},
	}
	for _, c := range cases {
		start := time.Now()
		_, errOut, code := taskhost(t, append(c.args, "--data-dir", work)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("taskhost %v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("taskhost %v took %v", c.args, took)
		}
	}
}

// SIGHUP (a closed terminal, a log rotation's kill -HUP) does not end the
// daemon: it logs it and serves on; SIGTERM still stops it cleanly.
func TestServeSurvivesSIGHUP(t *testing.T) {
	t.Parallel()
	data := testwait.ShortTempDir(t)
	d := startDaemon(t, data, "")
	for range 3 {
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 10*time.Second, "the SIGHUP log line", func() bool { return strings.Contains(d.logText(), "SIGHUP received") })
	if out, errOut, code := d.cli(t, "task", "list"); code != 0 {
		t.Fatalf("after SIGHUP: task list exit %d\n%s%s", code, out, errOut)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("SIGTERM after SIGHUP: exit %d", code)
	}
	if _, err := os.Lstat(filepath.Join(data, "taskhost.sock")); !os.IsNotExist(err) {
		t.Fatalf("the socket is left behind: %v", err)
	}
}

// Ctrl-C (or SIGTERM) at `taskhost run`'s approval prompt ends it at once:
// nothing is decided, the host stops, and the task is interrupted (exit 6),
// to be resumed later.
func TestRunSignalAtApprovalPrompt(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
			spec := writeSpec(t, work, map[string]any{"goal": "ask", "testexec": map[string]any{"steps": 1, "request_approval": true}})
			b := startBlocked(t, "run", "--data-dir", data, "--executor", "testexec", "--spec-file", spec)
			testwait.Until(t, 30*time.Second, "the approval prompt", func() bool { return strings.Contains(b.stderr.String(), "Approve? [y/N]") })
			code, took := b.signalAndWait(t, sig, 10*time.Second)
			if code != 6 {
				t.Fatalf("exit %d after %v at the prompt, want 6 (interrupted); stderr:\n%s", code, sig, b.stderr.String())
			}
			if !strings.Contains(b.stderr.String(), "nothing decided") || strings.Contains(b.stderr.String(), "rejected") {
				t.Fatalf("the signal decided the approval:\n%s", b.stderr.String())
			}
			t.Logf("%v at the prompt: exit %d after %v", sig, code, took.Round(time.Millisecond))
		})
	}
}
