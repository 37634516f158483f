package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/api"
	"github.com/taskhost/taskhost/internal/testwait"
)

// watchedBuffer is a buffer that says when it first holds a string.
type watchedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func newWatchedBuffer(want string) *watchedBuffer {
	return &watchedBuffer{want: want, seen: make(chan struct{})}
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.buf.String(), w.want)
	n, err := w.buf.Write(p)
	if !had && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runWithPrompt starts `taskhost run` on a testexec task that asks for an
// approval and returns once it asks at the terminal. answer writes to its
// stdin; wait returns its exit code.
func runWithPrompt(t *testing.T, ctx context.Context) (stdout *bytes.Buffer, stderr *watchedBuffer, answer io.WriteCloser, wait func() int) {
	t.Helper()
	dir, err := testexecDir()
	if err != nil {
		t.Fatal(err)
	}
	work := testwait.ShortTempDir(t) // the plugins' sockets are in the data dir
	cfg, spec := filepath.Join(work, "taskhost.toml"), filepath.Join(work, "spec.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "[executors.testexec]\npath = %q\n", filepath.Join(dir, "taskhost-executor-testexec")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(`{"goal": "g", "testexec": {"steps": 2, "request_approval": true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	in, answer := io.Pipe()
	stdout, stderr = &bytes.Buffer{}, newWatchedBuffer("Approve? [y/N] ")
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, &env{stdout: stdout, stderr: stderr, stdin: in}, []string{"run", "--data-dir", filepath.Join(work, "data"),
			"--config", cfg, "--executor", "testexec", "--spec-file", spec})
	}()
	select {
	case <-stderr.seen:
	case code := <-done:
		t.Fatalf("run ended (exit %d) before it asked:\n%s\n%s", code, stdout, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not ask for the approval within 30 s:\n%s", stderr)
	}
	return stdout, stderr, answer, func() int {
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatalf("run did not end within 30 s:\n%s", stderr)
			return -1
		}
	}
}

// `taskhost run` starts its daemon in its own process on a socket in a
// private directory (0700, the socket 0600), none in the data dir, and
// drives the task through it; the directory goes when it ends. Its
// approvals are its own to answer: it never points at 'taskhost approve'.
func TestRunServesItsTaskOnAPrivateSocket(t *testing.T) {
	stdout, stderr, answer, wait := runWithPrompt(t, context.Background())
	socks := listeningSockets(t)
	if len(socks) != 1 || filepath.Base(socks[0]) != api.SocketName || !strings.HasPrefix(socks[0], filepath.Join(os.TempDir(), "taskhost-run-")) {
		t.Fatalf("while run asks, this process listens on %v: want one %s in a private %s directory", socks, api.SocketName, filepath.Join(os.TempDir(), "taskhost-run-*"))
	}
	for path, want := range map[string]os.FileMode{filepath.Dir(socks[0]): 0o700, socks[0]: 0o600} {
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, want mode %o", path, fi.Mode(), want)
		}
	}
	if _, err := answer.Write([]byte("y\ny\n")); err != nil { // one approval a step
		t.Fatal(err)
	}
	if code := wait(); code != exitOK {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout.String(), " completed: steps 2/") || strings.Contains(stdout.String(), "taskhost approve") {
		t.Errorf("stdout:\n%s", stdout)
	}
	if _, err := os.Stat(filepath.Dir(socks[0])); !os.IsNotExist(err) {
		t.Errorf("the private socket directory %s outlived the run: %v", filepath.Dir(socks[0]), err)
	}
}

// Ctrl-C while run asks: nothing is decided, the host stops, and the task
// ends interrupted (host_shutdown), exit 6, resumable with run --resume.
func TestRunInterruptedWhileAsking(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, answer, wait := runWithPrompt(t, ctx)
	defer answer.Close()
	cancel()
	if code := wait(); code != exitInterrupted {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitInterrupted, stdout, stderr)
	}
	for _, want := range []string{"interrupted (host_shutdown)", "resume it with: taskhost run --resume t_"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr.String(), "(interrupted: nothing decided)") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// listeningSockets are the paths of the unix sockets this process has bound
// (its fds matched with /proc/net/unix by inode), the plugins' excepted.
func listeningSockets(t *testing.T) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.Trim(l[len("socket:"):], "[]")] = true
		}
	}
	table, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode Path; St 01 is listening.
		f := strings.Fields(line)
		if len(f) == 8 && f[5] == "01" && mine[f[6]] && !strings.Contains(f[7], "plugin") {
			paths = append(paths, f[7])
		}
	}
	return paths
}
