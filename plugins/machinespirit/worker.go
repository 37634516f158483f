package machinespirit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/internal/confine"
)

// workerSpec is how to start one swipl worker: confined through the
// trampoline, in the policy's working directory.
type workerSpec struct {
	path       string
	args       []string
	env        []string
	trampoline string
	policy     confine.Policy
	maxFrame   int
	logger     hclog.Logger
}

// frameMsg is what the reader goroutine hands over: a frame, or the error
// that ended reading (io.EOF when the worker closed its end of the protocol pipe).
type frameMsg struct {
	f   *inFrame
	err error
}

// worker is one running swipl process and its end of the JSON-lines
// protocol. It is used by one step at a time (the SDK never runs two steps
// at once); its goroutines only feed channels.
type worker struct {
	pid      int
	maxFrame int
	logger   hclog.Logger

	toWorker *os.File // the plugin's end of the worker's fd 4
	writeMu  sync.Mutex

	frames chan frameMsg
	// exited is closed once the process has been reaped; exitErr is its
	// wait status then.
	exited  chan struct{}
	exitErr error
	// stop is closed by close/kill so the reader never blocks on a frame
	// nobody will read.
	stop     chan struct{}
	stopOnce sync.Once

	stderr *tailBuffer
}

// startWorker starts swipl in its own process group, with a parent-death
// signal, and returns once the process runs. It does not wait for hello.
//
// The process is started, and waited for, from one goroutine locked to
// its OS thread: the kernel delivers Pdeathsig when the thread that forked
// the child exits, and the Go runtime may retire threads at will; a locked
// thread that lives exactly as long as the worker makes the signal mean
// "the plugin is gone" and nothing else.
func startWorker(ctx context.Context, spec workerSpec) (*worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := openWorkerPipes()
	if err != nil {
		return nil, err
	}
	cmd, err := spec.command()
	if err != nil {
		p.closeChildEnds()
		p.closeOurs()
		return nil, err
	}
	cmd.Env = spec.env
	// *os.File ends, not io.Readers/Writers: exec then starts no copying
	// goroutines, and Wait never closes a pipe we are still reading.
	// Stdin stays nil: the worker reads /dev/null there.
	cmd.Stdout = p.logW
	cmd.Stderr = p.logW
	cmd.ExtraFiles = append([]*os.File{p.toPluginW, p.toWorkerR}, cmd.ExtraFiles...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	logger := spec.logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	w := &worker{
		maxFrame: spec.maxFrame,
		logger:   logger,
		toWorker: p.toWorkerW,
		frames:   make(chan frameMsg, 16),
		exited:   make(chan struct{}),
		stop:     make(chan struct{}),
		stderr:   newTailBuffer(20, 512),
	}
	err = w.run(cmd)
	p.closeChildEnds() // the child holds its own copies
	if err != nil {
		p.closeOurs()
		return nil, fmt.Errorf("starting %s: %w", spec.path, err)
	}
	w.pid = cmd.Process.Pid

	go w.readFrames(p.toPluginR)
	go w.readLog(p.logR)
	return w, nil
}

// workerPipes are a worker's pipes. The protocol has two of its own: fd 3
// (worker → plugin) and fd 4 (plugin → worker). Stdout and stderr share a
// third that only feeds the log, so nothing the worker prints can pass for
// a frame.
type workerPipes struct {
	toPluginR, toPluginW *os.File
	toWorkerR, toWorkerW *os.File
	logR, logW           *os.File
}

func openWorkerPipes() (*workerPipes, error) {
	var p workerPipes
	for _, e := range []struct {
		what string
		r, w **os.File
	}{
		{"protocol out", &p.toPluginR, &p.toPluginW},
		{"protocol in", &p.toWorkerR, &p.toWorkerW},
		{"log", &p.logR, &p.logW},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeChildEnds()
			p.closeOurs()
			return nil, fmt.Errorf("worker %s pipe: %w", e.what, err)
		}
		*e.r, *e.w = r, w
	}
	return &p, nil
}

// closeChildEnds closes the ends the worker holds once started.
func (p *workerPipes) closeChildEnds() { closeAll(p.toPluginW, p.toWorkerR, p.logW) }

// closeOurs closes the ends the plugin reads and writes.
func (p *workerPipes) closeOurs() { closeAll(p.toWorkerW, p.toPluginR, p.logR) }

// run starts the worker and reaps it on a thread of its own
// (startOnOwnThread).
func (w *worker) run(cmd *exec.Cmd) error {
	exited, err := startOnOwnThread(cmd)
	if err != nil {
		return err
	}
	go func() {
		w.exitErr = <-exited
		close(w.exited)
	}()
	return nil
}

// startOnOwnThread starts cmd and reaps it, both on one locked thread, and
// returns what Wait returned on the channel. Pdeathsig fires when the
// thread that forked the child ends, and any goroutine that locks a thread
// and returns ends that thread: forked from a shared thread, the child
// could be killed whenever another goroutine happened to do so there. The
// thread is never unlocked and ends with the goroutine, after the reap.
func startOnOwnThread(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// command is the worker's command line, through the trampoline, before
// the pipes are attached.
func (spec workerSpec) command() (*exec.Cmd, error) {
	cmd, err := confine.Command(spec.trampoline, spec.policy, nil, spec.path, spec.args...)
	if err != nil {
		return nil, fmt.Errorf("confining the worker: %w", err)
	}
	return cmd, nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// readFrames decodes the worker's protocol pipe (its fd 3) into frames until EOF or the
// first protocol error, which it reports last before closing the channel.
func (w *worker) readFrames(r *os.File) {
	defer close(w.frames)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, w.maxFrame)
		var msg frameMsg
		switch {
		case err != nil && errors.Is(err, errFrameTooLarge):
			msg.err = &protocolError{msg: "oversized frame", err: err}
		case err != nil:
			msg.err = err
		default:
			msg.f, msg.err = decodeFrame(line)
		}
		select {
		case w.frames <- msg:
		case <-w.stop:
			return
		}
		if msg.err != nil {
			return
		}
	}
}

// maxLogLines bounds how many lines of a worker's stdout and stderr are
// logged; the last lines are kept for error messages regardless.
const maxLogLines = 1000

// readLog keeps the last lines of the worker's stdout and stderr for
// diagnostics and logs the first maxLogLines of them; Prolog warnings and
// anything else printed end here. Lines are cut to 512 bytes.
func (w *worker) readLog(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 4096)
	logged := 0
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			s := strings.TrimRight(string(line), "\n")
			w.stderr.add(s)
			switch {
			case logged < maxLogLines:
				w.logger.Debug("worker output", "pid", w.pid, "line", truncate(s, 512))
			case logged == maxLogLines:
				w.logger.Warn("worker output: further lines are not logged", "pid", w.pid, "lines", maxLogLines)
			}
			logged++
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// writeTimeout bounds one write to the worker's protocol pipe. The worker's main
// thread does nothing but read frames, so a write that blocks this long
// means the worker is wedged.
const writeTimeout = 5 * time.Second

// send writes one frame to the worker.
func (w *worker) send(v any) error {
	b, err := encodeFrame(v, w.maxFrame)
	if err != nil {
		return err
	}
	return w.sendRaw(b)
}

// sendRaw writes bytes as they are; tests use it to break the protocol.
func (w *worker) sendRaw(b []byte) error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	_ = w.toWorker.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := w.toWorker.Write(b); err != nil {
		return fmt.Errorf("writing to the worker: %w", err)
	}
	return nil
}

// recv waits for the next frame, the end of ctx, or the end of the frame
// stream.
func (w *worker) recv(ctx context.Context) (*inFrame, error) {
	select {
	case m, ok := <-w.frames:
		if !ok {
			return nil, io.EOF
		}
		return m.f, m.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// alive reports whether the process has not been reaped yet.
func (w *worker) alive() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// signalGroup signals the worker's process group, but only while the
// worker has not been reaped: after that the group id may be reused.
func (w *worker) signalGroup(sig syscall.Signal) {
	if w.alive() {
		_ = syscall.Kill(-w.pid, sig)
	}
}

// kill ends the worker: SIGTERM to its process group, then SIGKILL after
// grace. It returns once the process is reaped (or after a last bound).
func (w *worker) kill(grace time.Duration) {
	w.stopOnce.Do(func() { close(w.stop) })
	_ = w.toWorker.Close()
	w.signalGroup(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-w.exited:
		return
	case <-t.C:
	}
	w.signalGroup(syscall.SIGKILL)
	select {
	case <-w.exited:
	case <-time.After(5 * time.Second):
		w.logger.Error("worker did not exit after SIGKILL", "pid", w.pid)
	}
}

// close asks the worker to exit and kills it if it does not within grace.
func (w *worker) close(grace time.Duration) {
	if w.alive() {
		_ = w.send(shutdownFrame{Type: "shutdown"})
	}
	_ = w.toWorker.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-w.exited:
		w.stopOnce.Do(func() { close(w.stop) })
		return
	case <-t.C:
	}
	w.kill(grace)
}

// exitDescription describes how the worker ended, for error messages.
func (w *worker) exitDescription() string {
	if w.alive() {
		return "still running"
	}
	var ee *exec.ExitError
	if errors.As(w.exitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	if w.exitErr != nil {
		return w.exitErr.Error()
	}
	return "exit status 0"
}

// tailBuffer keeps the last n lines, each cut to width bytes.
type tailBuffer struct {
	mu    sync.Mutex
	n     int
	width int
	lines []string
}

func newTailBuffer(n, width int) *tailBuffer { return &tailBuffer{n: n, width: width} }

func (b *tailBuffer) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, truncate(s, b.width))
	if len(b.lines) > b.n {
		b.lines = b.lines[len(b.lines)-b.n:]
	}
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}
