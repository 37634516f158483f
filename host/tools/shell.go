package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/uids"
)

// shellPath is the minimal PATH a command gets; nothing of the host's
// environment is passed on.
const shellPath = "/usr/local/bin:/usr/bin:/bin"

// pipeDrainGrace bounds how long shell.run keeps reading output after the
// command's container was killed. Only a process that escaped it (see
// contain.go) can still hold the pipe then, and Call must not wait for it.
const pipeDrainGrace = time.Second

func bindShell(c *call) (action, error) {
	var command string
	present, err := c.decode("command", "a string", &command)
	if err = c.required("command", present, err); err != nil {
		return nil, err
	}
	switch {
	case strings.TrimSpace(command) == "":
		return nil, c.argErr("command", "is empty")
	case len(command) > MaxCommandBytes:
		return nil, c.argErr("command", "is %d bytes; the limit is %d", len(command), MaxCommandBytes)
	case strings.IndexByte(command, 0) >= 0:
		return nil, c.argErr("command", "contains a NUL byte")
	}
	timeout := c.timeout
	var secs int64
	hasTimeout, err := c.decode("timeout_seconds", "an integer", &secs)
	if err != nil {
		return nil, err
	}
	if hasTimeout {
		maxSecs := int64(c.timeout / time.Second)
		if secs < 1 || secs > maxSecs {
			return nil, c.argErr("timeout_seconds", "is %d; it must be in 1..%d (the tool's timeout)", secs, maxSecs)
		}
		timeout = time.Duration(secs) * time.Second
	}
	return func(ctx context.Context) (Result, error) {
		root, err := c.r.openWorkspace(c.taskID)
		if err != nil {
			return Result{}, err
		}
		root.Close()
		if timeout < c.timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, timeout, &timeoutError{after: timeout})
			defer cancel()
		}
		return c.r.runShell(ctx, c.ws, command)
	}, nil
}

// runShell runs command with /bin/sh -c in dir, in a container of its own
// (a cgroup, or a tracked session; see contain.go), and kills everything in
// that container when the shell exits, when ctx ends or when the registry
// is closed, so no process of the command outlives the call.
func (r *Registry) runShell(ctx context.Context, dir, command string) (Result, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("pipe: %w", err)
	}
	defer pr.Close()
	job, err := r.prepareShell(ctx, dir, command)
	if err != nil {
		pw.Close()
		return Result{}, err
	}
	defer job.close()
	cmd := job.cmd
	// stdin stays nil, which is /dev/null. stdout and stderr share one
	// pipe, so the output keeps its interleaving. Being an *os.File, it is
	// handed to the child as is: Wait returns when the shell exits, not
	// when every process holding the pipe has closed it.
	cmd.Stdout, cmd.Stderr = pw, pw
	box, err := r.newContainer()
	if err != nil {
		pw.Close()
		return Result{}, err
	}
	box.setup(cmd.SysProcAttr)

	// Pdeathsig fires when the thread that forked the child exits, not the
	// process. Keep this goroutine on its thread until the shell is reaped
	// so the runtime cannot retire that thread under a running command.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	err = cmd.Start()
	pw.Close() // the child has its copy; EOF must come when the command's processes are gone
	if err != nil {
		box.started(0)
		_ = box.release()
		return Result{}, fmt.Errorf("start /bin/sh: %w", err)
	}
	box.started(cmd.Process.Pid)
	closed := !r.track(box)
	defer r.untrack(box)
	if closed {
		box.kill()
	}
	// The kill runs the moment ctx ends, in a goroutine of its own: not
	// after this one, locked to its thread, has been scheduled again,
	// which on a loaded machine can take a while.
	stopKill := context.AfterFunc(ctx, box.kill)
	defer stopKill()
	watch := watchLimits(box, job.v1, job.disk)

	out := readTail(pr)
	werr, stopped := waitShell(ctx, cmd, box)
	limit := watch.End()
	discarded, serr := job.settle(ctx, box, dir)
	if stopped == nil {
		stopped = serr
	}
	if discarded {
		limit = limitDisk
	}
	if stopped == nil && r.isClosed() {
		closed = true // Close killed it: its exit status says nothing of the command
	}
	out.finish()
	if stopped != nil {
		return Result{}, stopped
	}
	if closed {
		return Result{}, ErrClosed
	}
	return shellResult(werr, out.buf, limit, discarded)
}

// outputTail reads a command's output pipe into a tailBuffer.
type outputTail struct {
	pr   *os.File
	buf  *tailBuffer
	done chan struct{}
}

func readTail(pr *os.File) *outputTail {
	o := &outputTail{pr: pr, buf: &tailBuffer{limit: MaxShellOutputBytes}, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		// A read error (the drain deadline) ends the output; what was
		// read is kept.
		_, _ = io.Copy(o.buf, pr)
	}()
	return o
}

// finish reads on for at most pipeDrainGrace, then stops.
func (o *outputTail) finish() {
	if err := o.pr.SetReadDeadline(time.Now().Add(pipeDrainGrace)); err != nil {
		o.pr.Close() // no deadline support: closing also ends the read
	}
	<-o.done
}

// waitShell waits for the shell to exit, killing its container first when
// ctx ends. werr is the shell's exit; stopped is ctx's cause when ctx
// ended, whatever the exit status says.
func waitShell(ctx context.Context, cmd *exec.Cmd, box container) (werr, stopped error) {
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case werr = <-waited:
	case <-ctx.Done():
		box.kill()
		werr = <-waited
	}
	if ctx.Err() != nil {
		// Killed by the kill above, or by the one ctx's end ran, which
		// may have been reaped first: either way the exit status is the
		// kill's, not the command's, and nothing is known of how far it
		// got.
		return werr, context.Cause(ctx)
	}
	return werr, nil
}

// shellJob is a command ready to start: its exec.Cmd and, when confined,
// its uid, v1 cgroups and workspace disk, with what undoes each.
type shellJob struct {
	cmd  *exec.Cmd
	uid  int // 0: the daemon's own (unconfined)
	v1   *cgroups.Cgroups1
	disk *workspaceDisk
	// undo runs in reverse order at close: the disk's tmpfs is closed
	// before the v1 cgroups its pages are charged to are removed, and the
	// workspace changes hands back last, once every process is gone.
	undo []func()
}

func (j *shellJob) close() {
	for i := len(j.undo) - 1; i >= 0; i-- {
		j.undo[i]()
	}
}

// prepareShell makes the command's job: unconfined, /bin/sh in dir; else
// the confined trampoline under a uid of its own, in its v1 cgroups and
// over its bounded disk where those exist. On an error nothing is left.
func (r *Registry) prepareShell(ctx context.Context, dir, command string) (_ *shellJob, err error) {
	j := &shellJob{}
	defer func() {
		if err != nil {
			j.close()
			return
		}
		// TMPDIR: a confined command can write nowhere but its workspace.
		j.cmd.Env = []string{"PATH=" + shellPath, "HOME=" + dir, "TMPDIR=" + dir, "LANG=C"}
		j.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}()
	if r.confine == nil {
		j.cmd = exec.Command("/bin/sh", "-c", command)
		j.cmd.Dir = dir
		return j, nil
	}
	uid, handBack, err := r.ownUID(dir)
	if err != nil {
		return nil, err
	}
	j.uid = uid
	j.undo = append(j.undo, handBack)
	if r.v1 != nil {
		if j.v1, err = r.v1.New("cmd-", r.limits); err != nil {
			return nil, err
		}
		v1 := j.v1
		j.undo = append(j.undo, func() {
			if err := v1.Release(); err != nil {
				r.log.Error("shell.run: a command's cgroups not removed", "error", err)
			}
		})
	}
	if r.diskWhy == "" {
		// After ownUID: the overlay's root takes the workspace's owner.
		if j.disk, err = newDisk(ctx, dir); err != nil {
			return nil, err
		}
		j.undo = append(j.undo, j.disk.close)
	}
	var join []string
	if j.v1 != nil {
		join = j.v1.Join()
	}
	if j.cmd, err = r.confine.command(dir, command, uid, join, j.disk); err != nil {
		return nil, err
	}
	return j, nil
}

// settle ends whatever of the command still runs once its shell exited and
// keeps its writes: the container is released (every process in it
// killed), the v1 cgroups emptied, and the disk's upper layer merged into
// the workspace — even after a timeout or a cancel, as on a disk of its
// own — unless a process of the command could still change it. discarded
// reports writes the workspace's limit refused whole.
func (j *shellJob) settle(ctx context.Context, box container, dir string) (discarded bool, err error) {
	relErr := box.release()
	err = relErr
	if j.v1 != nil {
		// Without cgroup2 (a session container) the v1 cgroups are the
		// only complete list of the command's processes.
		j.v1.Kill()
	}
	// A command whose container could not be emptied keeps nothing: what
	// still runs of it could change its upper layer under the merge.
	merge := j.disk != nil && relErr == nil
	if merge && j.uid > 0 {
		// Nothing of the command may change its upper layer while it is
		// merged: not even a process the container did not hold.
		if kerr := uids.KillAll(j.uid); kerr != nil {
			return false, fmt.Errorf("processes of the command's uid survive; its writes are not kept: %w", kerr)
		}
	}
	if !merge {
		return false, err
	}
	discarded, merr := j.disk.merge(context.WithoutCancel(ctx), dir)
	if merr != nil {
		return discarded, fmt.Errorf("merge the command's writes into its workspace: %w", merr)
	}
	return discarded, nil
}

// shellOutcome is shell.run's result as the model reads it.
type shellOutcome struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Limit names the bound that ended the command: "memory",
	// "processes" or "disk" (its cgroup or its workspace's
	// filesystem; the command was ended whole when it reached it), or
	// the rlimit a signal of the shell (or of the child whose 128+N
	// it exits with) reports: "cpu" (SIGXCPU, max_cpu_seconds),
	// "file_size" (SIGXFSZ, max_file_mb).
	Limit string `json:"limit,omitempty"`
	// ChangesDiscarded: the command's writes would have taken the
	// workspace past its limit, and none of them was kept.
	ChangesDiscarded bool   `json:"changes_discarded,omitempty"`
	Output           string `json:"output"`
	Truncated        bool   `json:"truncated"`
	OutputBytes      int64  `json:"output_bytes"`
}

// shellResult is the result of a shell that exited with werr (nil: status
// 0), its output out, and the bound that ended it, if any.
func shellResult(werr error, out *tailBuffer, limit string, discarded bool) (Result, error) {
	res := shellOutcome{OutputBytes: out.total, ChangesDiscarded: discarded}
	if werr != nil {
		ee, ok := errors.AsType[*exec.ExitError](werr)
		if !ok {
			return Result{}, fmt.Errorf("wait for /bin/sh: %w", werr)
		}
		status, _ := ee.Sys().(syscall.WaitStatus)
		if status.Signaled() {
			// The shell's own convention for a command killed by a signal.
			res.ExitCode, res.Signal = 128+int(status.Signal()), status.Signal().String()
			res.Limit = limitOf(status.Signal())
		} else {
			res.ExitCode = status.ExitStatus()
			// The shell reports a child a signal ended as 128+N.
			if n := res.ExitCode - 128; n > 0 && n < 65 {
				res.Limit = limitOf(syscall.Signal(n))
			}
		}
	}
	if limit != "" {
		res.Limit = limit
	}
	res.Output, res.Truncated = out.text()
	return Result{Output: mustJSON(res), IsError: res.ExitCode != 0 || limit != ""}, nil
}

// tailBuffer keeps the last limit bytes written to it, in memory bounded by
// twice the limit, and counts all of them.
type tailBuffer struct {
	limit int
	buf   []byte
	total int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.total += int64(len(p))
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
	}
	return len(p), nil
}

// text returns the output, at most limit bytes: all of it, or a marker
// followed by its tail, which is where a failing command's errors are.
func (t *tailBuffer) text() (string, bool) {
	if t.total <= int64(t.limit) {
		return string(t.buf), false
	}
	marker := fmt.Sprintf("[output truncated: %d bytes in all, the last ones follow]\n", t.total)
	tail := t.buf[len(t.buf)-max(t.limit-len(marker), 0):]
	// Do not start in the middle of a UTF-8 sequence.
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	return marker + string(tail), true
}

// limitOf names the rlimit a signal reports, or "".
func limitOf(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGXCPU:
		return "cpu"
	case syscall.SIGXFSZ:
		return "file_size"
	}
	return ""
}
