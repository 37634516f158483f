package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"
	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/text"
)

// forker runs process starts on one goroutine locked to its OS thread for the
// forker's whole life. Pdeathsig fires when the *thread* that forked a child
// exits; starting children from an arbitrary goroutine would let the Go
// runtime retire that thread and kill a healthy plugin.
type forker struct {
	reqs chan func()
	done chan struct{}
	// cleanups counts go-plugin clean-ups still running after their
	// plugin stopped (they remove its socket dir), so that a closing
	// registry can wait for them.
	cleanups sync.WaitGroup
	// unboundedWarn says once that plugin run dirs get no tmpfs here.
	unboundedWarn sync.Once
}

func newForker() *forker {
	f := &forker{reqs: make(chan func()), done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		// Never unlocked: when this goroutine ends, the thread ends with it,
		// and any child still alive then gets its parent-death signal.
		close(ready)
		for {
			select {
			case fn := <-f.reqs:
				fn()
			case <-f.done:
				return
			}
		}
	}()
	<-ready
	return f
}

// start starts cmd on the locked thread.
func (f *forker) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	select {
	case f.reqs <- func() { errc <- cmd.Start() }:
	case <-f.done:
		return errors.New("host is shutting down: no new plugin processes")
	}
	return <-errc
}

func (f *forker) close() { close(f.done) }

// ExitStatus is how a plugin process ended.
type ExitStatus struct {
	Code   int    // -1 when killed by a signal or unknown
	Signal string // e.g. "killed"; "" when it exited normally
	// Limit, when set, says its cgroups reached a limit, which ended it.
	Limit *LimitError
}

func (e ExitStatus) String() string {
	if e.Signal != "" {
		return "signal: " + e.Signal
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// process is a go-plugin runner.Runner that owns the plugin's OS process: it
// puts the plugin in its own process group, starts it on the forker's locked
// thread with a parent-death signal, and learns of its death from the wait
// status — not from go-plugin's Exited(), which waits for every holder of the
// plugin's stderr (a grandchild can hold it for minutes).
type process struct {
	cmd    *exec.Cmd
	name   string // the plugin binary (cmd.Path is the trampoline)
	forker *forker

	stdoutR, stderrR *os.File
	stdoutW, stderrW *os.File
	stderr           *tailReader

	// socketDir is the fresh dir the plugin's go-plugin listener must be
	// in: the only address its handshake may name.
	socketDir string

	exited   chan struct{} // closed once the wait status is known
	status   ExitStatus
	pid      int
	stopping atomic.Bool // the host ended the process: its exit is no error

	// box holds the process and all it starts (cgroup.go); nil: no
	// cgroups here. watch ends it at a limit while it runs.
	box *cgroups.Box
	// emptied: box held the process tree and was removed empty (set once,
	// under releaseOnce).
	emptied bool
	limits  cgroups.Limits
	watch   *cgroups.Watch
	log     hclog.Logger
	// releaseOnce: stop may be called more than once (a failed launch).
	releaseOnce sync.Once
}

var _ runner.Runner = (*process)(nil)

// newProcess prepares cmd (its path, arguments and complete environment
// set) to run in its own process group with a parent-death signal.
func newProcess(f *forker, name string, cmd *exec.Cmd, tailLines int, log *pluginLog) (*process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, name: name, forker: f, exited: make(chan struct{})}
	var err error
	if p.stdoutR, p.stdoutW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stderrR, p.stderrW, err = os.Pipe(); err != nil {
		p.stdoutR.Close()
		p.stdoutW.Close()
		return nil, err
	}
	// Plain *os.File writers: exec.Cmd hands them to the child directly and
	// runs no copying goroutine, so Wait returns at the child's exit.
	cmd.Stdout, cmd.Stderr = p.stdoutW, p.stderrW
	p.stderr = newTailReader(p.stderrR, tailLines)
	p.stderr.unread = pipeUnread(p.stderrR)
	p.stderr.log = log
	return p, nil
}

// contain puts the process, once started, in box's cgroups, whose limits
// are l; box may be nil. Called before Start.
func (p *process) contain(box *cgroups.Box, l cgroups.Limits, log hclog.Logger) {
	p.box, p.limits, p.log = box, l, log
	if box != nil {
		box.Setup(p.cmd.SysProcAttr)
	}
}

// releaseCgroups kills what is left in box and removes it, and reports
// whether box held the process tree and is gone; box may be nil.
func releaseCgroups(box *cgroups.Box, log hclog.Logger) (emptied bool) {
	if box == nil {
		return false
	}
	if err := box.Release(); err != nil {
		log.Error("a plugin's cgroups not removed", "error", err)
		return false
	}
	return box.Holds()
}

func (p *process) Start(context.Context) error {
	err := p.forker.start(p.cmd)
	// The child has its own copies; ours would keep the pipes open forever.
	p.stdoutW.Close()
	p.stderrW.Close()
	if p.box != nil {
		p.box.Started()
	}
	if err != nil {
		p.stdoutR.Close()
		p.stderrR.Close()
		releaseCgroups(p.box, p.log)
		p.box = nil
		close(p.exited)
		p.status = ExitStatus{Code: -1}
		return err
	}
	p.pid = p.cmd.Process.Pid
	if p.box != nil {
		p.watch = cgroups.NewWatch(pluginLimitPoll, p.box.Hit, p.box.Kill)
	}
	// The host reads stderr itself, not go-plugin (which logs plain lines
	// at DEBUG with no task and no bound): the reader ends at EOF, when the
	// last holder of the pipe (the group, killed at stop) is gone.
	go io.Copy(io.Discard, p.stderr)
	go func() {
		err := p.cmd.Wait()
		status := exitStatusOf(p.cmd.ProcessState, err)
		if p.watch != nil {
			// Before the exit is published: a crash verdict reads it.
			if limit := p.watch.End(); limit != "" {
				status.Limit = limitError(limit, p.limits)
			}
		}
		p.status = status
		close(p.exited)
	}()
	return nil
}

func exitStatusOf(ps *os.ProcessState, err error) ExitStatus {
	if ps == nil {
		return ExitStatus{Code: -1, Signal: fmt.Sprint(err)}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitStatus{Code: -1, Signal: ws.Signal().String()}
	}
	return ExitStatus{Code: ps.ExitCode()}
}

// Wait blocks until the process has exited.
func (p *process) Wait(ctx context.Context) error {
	select {
	case <-p.exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	if p.status.Code != 0 && !p.stopping.Load() {
		return errors.New(p.status.String())
	}
	return nil
}

// Kill SIGKILLs the whole process group, and everything in its cgroups.
func (p *process) Kill(context.Context) error {
	p.signalGroup(syscall.SIGKILL)
	if p.box != nil {
		p.box.Kill()
	}
	return nil
}

func (p *process) signalGroup(sig syscall.Signal) {
	if p.pid > 0 {
		// The group outlives its leader while any member lives, so this also
		// reaches grandchildren after the plugin itself is gone.
		_ = syscall.Kill(-p.pid, sig)
	}
}

// stop ends the process group: SIGTERM, up to grace for the leader to exit,
// then SIGKILL; then it kills what is left in its cgroups and removes them.
// It returns once the leader's wait status is known or after a bounded
// wait, and the cgroups are gone (bounded too).
func (p *process) stop(grace time.Duration) {
	p.stopping.Store(true)
	defer p.releaseCgroups()
	select {
	case <-p.exited:
		p.signalGroup(syscall.SIGKILL) // leftovers of the group
		return
	default:
	}
	p.signalGroup(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	}
	p.signalGroup(syscall.SIGKILL)
	// SIGKILL is delivered even to a stopped process; this bound only guards
	// against a wait that never comes back.
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
}

// releaseCgroups removes the process's cgroups, killing what is left in
// them, once: after its exit status is known, so that the watch has read
// their counters.
func (p *process) releaseCgroups() {
	if p.box == nil {
		return
	}
	select {
	case <-p.exited:
	default:
		p.box.Kill() // the bounded wait in stop ran out
		select {
		case <-p.exited:
		case <-time.After(cgroups.EmptyWait):
		}
	}
	p.releaseOnce.Do(func() { p.emptied = releaseCgroups(p.box, p.log) })
}

// cgroupsEmptied reports, once stop returned, whether the process's cgroups were
// removed empty: then nothing the process or anything it started runs any
// more, under any uid, since all of it was born inside them (the
// trampoline joins them before it takes the plugin's uid).
func (p *process) cgroupsEmptied() bool {
	return p.emptied
}

func (p *process) Stdout() io.ReadCloser { return p.stdoutR }

// Stderr is what go-plugin reads of the plugin's stderr: nothing, since
// the host reads the pipe itself.
func (p *process) Stderr() io.ReadCloser { return io.NopCloser(strings.NewReader("")) }
func (p *process) Name() string          { return p.name }
func (p *process) ID() string            { return strconv.Itoa(p.pid) }

func (p *process) Diagnose(context.Context) string {
	select {
	case <-p.exited:
		return fmt.Sprintf("the plugin process exited (%s); last stderr lines:\n%s", p.status, p.stderr.tail())
	default:
		return "the plugin process is running but did not complete the go-plugin handshake"
	}
}

// PluginToHost is where go-plugin learns the address the plugin's
// handshake line names, before the daemon dials it from its own, unconfined
// process. Only a unix socket in the plugin's own socket dir is dialed: any
// other address (a TCP listener anywhere, another process's socket) fails
// the handshake.
func (p *process) PluginToHost(network, addr string) (string, string, error) {
	if err := checkHandshakeAddr(p.socketDir, network, addr); err != nil {
		return "", "", err
	}
	return network, addr, nil
}

// ErrHandshakeAddr: a plugin's handshake named an address outside its own
// socket dir.
var ErrHandshakeAddr = errors.New("plugin handshake: the address is not a socket in the plugin's own socket dir")

// checkHandshakeAddr refuses a handshake address other than a unix socket
// directly in socketDir.
func checkHandshakeAddr(socketDir, network, addr string) error {
	if network != "unix" {
		return fmt.Errorf("%w: it names %s %q", ErrHandshakeAddr, text.Clip(network, 16), text.Clip(addr, 256))
	}
	if socketDir == "" || !filepath.IsAbs(addr) || filepath.Dir(filepath.Clean(addr)) != filepath.Clean(socketDir) {
		return fmt.Errorf("%w: it names unix %q, not a socket in %s", ErrHandshakeAddr, text.Clip(addr, 256), socketDir)
	}
	fi, err := os.Lstat(addr)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHandshakeAddr, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %q is %v, not a socket", ErrHandshakeAddr, text.Clip(addr, 256), fi.Mode().Type())
	}
	return nil
}

func (p *process) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// tailReader passes a stream through and remembers its last lines, bounded in
// count and length, so a crash record can carry the plugin's panic lines.
type tailReader struct {
	r        io.ReadCloser
	maxLines int

	mu    sync.Mutex
	lines []string
	part  []byte
	cut   bool // part lost bytes past maxLogLine
	// log, when set, gets every line the rate bucket admits; out holds
	// them from the parse (under mu) to the forward (outside it).
	log   *pluginLog
	out   []logLine
	panic string // the first "panic:" or "fatal error:" line: the cause sits above a long trace
	eof   chan struct{}
	once  sync.Once

	// unread reports the bytes still in the pipe, not yet read; nil when
	// the stream cannot tell (settle then waits for EOF or its bound).
	unread func() (int, error)
	// busy is set while bytes a Read took are not yet in lines.
	busy atomic.Bool
}

const (
	maxTailLine  = 512
	maxTailBytes = 4000 // fits the store's stderr_tail bound
)

func newTailReader(r io.ReadCloser, maxLines int) *tailReader {
	return &tailReader{r: r, maxLines: maxLines, eof: make(chan struct{})}
}

type logLine struct {
	b       []byte
	cut     bool
	dropped int // lines the rate bound dropped just before this one
}

func (t *tailReader) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	t.busy.Store(true)
	t.mu.Lock()
	for _, c := range b[:n] {
		if c == '\n' {
			t.push()
			continue
		}
		if len(t.part) < maxLogLine {
			t.part = append(t.part, c)
		} else {
			t.cut = true
		}
	}
	out := t.out
	t.out = nil
	endDropped := 0
	if err != nil && t.log != nil {
		if len(t.part) > 0 {
			if ok, dropped := t.log.admit(); ok {
				out = append(out, logLine{b: slices.Clone(t.part), cut: t.cut, dropped: dropped})
			}
		}
		endDropped, t.log.dropped = t.log.dropped, 0
	}
	t.mu.Unlock()
	// The tail is complete here: a crash verdict need not wait for the
	// forward to the host log.
	t.busy.Store(false)
	for _, l := range out {
		t.log.line(l)
	}
	if err != nil {
		if t.log != nil {
			t.log.end(endDropped)
		}
		t.once.Do(func() { close(t.eof) })
	}
	return n, err
}

func (t *tailReader) push() {
	t.pushLine(t.part, t.cut)
	t.part, t.cut = t.part[:0], false
}

// pushLine keeps b in the tail and queues it for the log. Called under mu.
func (t *tailReader) pushLine(b []byte, cut bool) {
	line := string(b[:min(len(b), maxTailLine)])
	if t.panic == "" && (strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ")) {
		t.panic = line
	}
	if t.log != nil {
		if ok, dropped := t.log.admit(); ok {
			t.out = append(t.out, logLine{b: slices.Clone(b), cut: cut, dropped: dropped})
		}
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > t.maxLines {
		t.lines = t.lines[len(t.lines)-t.maxLines:]
	}
}

func (t *tailReader) Close() error { return t.r.Close() }

// flushDropped reports the lines dropped since the last admitted one; the
// relay of go-plugin has no end of its own to report them at.
func (t *tailReader) flushDropped() {
	if t.log == nil {
		return
	}
	t.mu.Lock()
	n := t.log.dropped
	t.log.dropped = 0
	t.mu.Unlock()
	t.log.end(n)
}

// streamWriter takes what go-plugin relays of the plugin's os.Stdout and
// os.Stderr once it serves (it points both at pipes of its own and streams
// them over gRPC) and adds its lines to the tail and the log, as the
// process's own stderr does. It keeps its own partial line, so the two
// streams never splice.
type streamWriter struct {
	t    *tailReader
	part []byte
	cut  bool
}

func (w *streamWriter) Write(b []byte) (int, error) {
	t := w.t
	t.mu.Lock()
	for _, c := range b {
		if c == '\n' {
			t.pushLine(w.part, w.cut)
			w.part, w.cut = w.part[:0], false
			continue
		}
		if len(w.part) < maxLogLine {
			w.part = append(w.part, c)
		} else {
			w.cut = true
		}
	}
	out := t.out
	t.out = nil
	t.mu.Unlock()
	for _, l := range out {
		t.log.line(l)
	}
	return len(b), nil
}

// tail returns the remembered lines, newest last, at most maxTailBytes,
// led by the panic line when the trace below it pushed it out.
func (t *tailReader) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := append([]string(nil), t.lines...)
	if len(t.part) > 0 {
		lines = append(lines, string(t.part[:min(len(t.part), maxTailLine)]))
	}
	head := ""
	if t.panic != "" && (len(lines) == 0 || !slices.Contains(lines, t.panic)) {
		head = t.panic + "\n...\n"
	}
	size := len(head)
	keep := len(lines)
	for keep > 0 && size+len(lines[keep-1])+1 <= maxTailBytes {
		size += len(lines[keep-1]) + 1
		keep--
	}
	return head + strings.Join(lines[keep:], "\n")
}

// settle waits, after the process exited, until its last lines are in the
// tail: until EOF, or until the pipe is empty and no read is being parsed,
// seen twice a moment apart — the read that emptied the pipe may not have
// marked itself busy yet at the first look. EOF alone cannot decide: a
// grandchild holding the write end keeps it from ever coming, and waiting
// for it would delay the crash verdict. d bounds the wait for bytes that
// stay unread (a holder that writes faster than they are read).
func (t *tailReader) settle(d time.Duration) {
	const poll = time.Millisecond
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	unread := t.unread
	quiet := 0
	for {
		if unread != nil {
			n, err := unread()
			switch {
			case err != nil:
				unread = nil // closed: only EOF or the bound now
			case n > 0 || t.busy.Load():
				quiet = 0
			default:
				if quiet++; quiet >= 2 {
					return
				}
				// The second look comes after a short yield, not a tick:
				// a timer this short rounds up to a millisecond or more.
				for at := time.Now(); time.Since(at) < 100*time.Microsecond; {
					runtime.Gosched()
				}
				continue
			}
		}
		select {
		case <-t.eof:
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// pipeUnread reports how many bytes wait unread in the pipe f (TIOCINQ is
// Linux's FIONREAD, which pipes answer too).
func pipeUnread(f *os.File) func() (int, error) {
	return func() (int, error) {
		rc, err := f.SyscallConn()
		if err != nil {
			return 0, err
		}
		var n int
		var ierr error
		if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
			return 0, err
		}
		return n, ierr
	}
}
