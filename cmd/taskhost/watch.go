package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

const defaultReconnect = 2 * time.Minute

type watchOptions struct {
	reconnect  time.Duration // 0: the default
	noProgress bool
	// minRun hides the events of earlier runs (a resumed task's history).
	minRun int64
	// onEvent, when set, is called for each event after it is printed (the
	// demo kills a plugin from it).
	onEvent func(ev *apipb.Event)
	// approvals, when set, answers the task's pending approvals each time
	// it waits for one (the decider of taskhost run and the demo) and
	// returns how many it approved; the view then does not point at
	// 'taskhost approve'.
	approvals func(taskID string) int
	// resumeWith is the command an interrupted task is resumed with
	// (default: taskhost task resume).
	resumeWith string
}

// watchTask follows task id until it stops running and returns the exit code
// for its final status. A stream lost to a daemon restart is resumed from the
// last event seen.
func watchTask(ctx context.Context, e *env, cf *clientFlags, tc apipb.TaskServiceClient, id string, o watchOptions) int {
	if o.reconnect == 0 {
		o.reconnect = defaultReconnect
	}
	w := &watchView{e: e, json: cf.json, answered: o.approvals != nil, resumeWith: cmp.Or(o.resumeWith, "taskhost task resume")}
	if !cf.json && !o.noProgress && escapesAllowed(os.Getenv) {
		w.width, w.progress = terminalWidth(e.stdout)
	}
	if w.progress {
		stopTick := make(chan struct{})
		defer close(stopTick)
		go w.tick(stopTick)
	}
	var after int64
	connected := false
	var lostAt time.Time
	delay := 50 * time.Millisecond
	for {
		stream, err := tc.WatchTask(ctx, &apipb.WatchTaskRequest{TaskId: id, AfterSeq: after})
		for err == nil {
			var msg *apipb.WatchTaskResponse
			if msg, err = stream.Recv(); err != nil {
				break
			}
			if !lostAt.IsZero() {
				fmt.Fprintf(e.stderr, "taskhost: reconnected to the daemon; continuing after event %d\n", after)
				lostAt, delay = time.Time{}, 50*time.Millisecond
			}
			connected = true
			switch it := msg.Item.(type) {
			case *apipb.WatchTaskResponse_Snapshot:
				w.snapshot(it.Snapshot)
			case *apipb.WatchTaskResponse_Event:
				ev := it.Event
				after = ev.GetSeq()
				if ev.GetRunId() < o.minRun {
					continue
				}
				w.event(ev)
				if o.onEvent != nil {
					o.onEvent(ev)
				}
				if o.approvals != nil && ev.GetType() == host.EventTaskWaitingApproval {
					o.approvals(id)
				}
			case *apipb.WatchTaskResponse_Final:
				return w.final(it.Final)
			}
		}
		w.lost()
		switch {
		case ctx.Err() != nil:
			fmt.Fprintf(e.stderr, "taskhost: stopped watching; the task keeps running in the daemon (taskhost task watch %s to follow it again)\n", id)
			return exitSignal
		case !connected || !reconnectable(err):
			return cf.fail(e, err)
		}
		now := time.Now()
		if lostAt.IsZero() {
			lostAt = now
			fmt.Fprintf(e.stderr, "taskhost: lost the daemon (%s); reconnecting for up to %s...\n", status.Convert(err).Message(), o.reconnect)
		} else if now.Sub(lostAt) > o.reconnect {
			errorf(e, "the daemon did not come back within %s (--reconnect-timeout); the task's state is unknown: check it with 'taskhost task status %s'", o.reconnect, id)
			return exitUnavailable
		}
		if !sleepCtx(ctx, delay) {
			fmt.Fprintf(e.stderr, "taskhost: stopped watching while reconnecting\n")
			return exitSignal
		}
		delay = min(delay*2, time.Second)
	}
}

// reconnectable reports whether a watch stream broke because the daemon
// went away (or is stopping), rather than refusing the watch.
func reconnectable(err error) bool {
	if errors.Is(err, io.EOF) {
		return true // the stream ended without its final message
	}
	return status.Code(err) == codes.Unavailable
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// watchView prints what a watch sees: one line per event and, on a
// terminal, a progress line kept at the bottom.
type watchView struct {
	mu       sync.Mutex // the ticker redraws the progress line too
	e        *env
	json     bool
	progress bool
	// answered: the caller answers approvals (watchOptions.approvals).
	answered bool
	// resumeWith: the command that resumes an interrupted task.
	resumeWith string
	width      int  // the terminal's columns
	shown      bool // the progress line is on screen
	seenTask   bool

	id, status, attempt, steps, tools, models, wall string
	promptTokens, completionTokens                  int64
	start                                           time.Time
	asOf                                            int64 // the snapshot's time, Unix nanoseconds
}

// tick redraws the progress line every second until stop is closed, so its
// clock moves while the task is quiet (waiting for an approval, say).
func (w *watchView) tick(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.mu.Lock()
			if w.shown {
				w.drawProgress()
			}
			w.mu.Unlock()
		case <-stop:
			return
		}
	}
}

// lost clears the progress line before a message about the connection.
func (w *watchView) lost() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clearProgress()
}

func (w *watchView) snapshot(t *apipb.Task) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.id, w.status, w.asOf = t.GetId(), t.GetStatus(), t.GetUpdatedUnixNano()
	b := t.GetBudgets()
	w.steps, w.tools, w.models = meter(b.GetSteps()), meter(b.GetToolCalls()), meter(b.GetModelCalls())
	w.wall = fmt.Sprintf("%d/%d", b.GetWallMs().GetUsed()/1000, b.GetWallMs().GetLimit()/1000)
	if w.seenTask { // a snapshot after a reconnect: nothing new to print
		w.drawProgress()
		return
	}
	w.seenTask, w.start = true, time.Now()
	switch {
	case w.json:
		newPrinter(w.e, true).emit(map[string]any{"kind": "task", "task": taskJSON(t)})
	default:
		fmt.Fprintf(w.e.stdout, "task %s (executor %s, run %d, %s)\n", t.GetId(), t.GetExecutor(), t.GetRunId(), t.GetStatus())
	}
	w.drawProgress()
}

func (w *watchView) event(ev *apipb.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var f host.EventPayload
	_ = json.Unmarshal(ev.GetPayload(), &f)
	// Each step's event counts its model calls' tokens: summed over the
	// events the watch is sent, history included.
	w.promptTokens += f.PromptTokens
	w.completionTokens += f.CompletionTokens
	if ev.GetTimeUnixNano() < w.asOf {
		// History older than the snapshot: print it, keep the display.
		f = host.EventPayload{}
	}
	for _, kv := range []struct {
		dst *string
		v   string
	}{{&w.status, f.Status}, {&w.steps, f.Steps}, {&w.tools, f.Tools}, {&w.models, f.Models}, {&w.wall, f.WallSecs}} {
		if kv.v != "" {
			*kv.dst = kv.v
		}
	}
	if f.Attempt > 0 {
		w.attempt = fmt.Sprint(f.Attempt)
	}

	w.clearProgress()
	newPrinter(w.e, w.json).event(ev)
	if !w.json && !w.answered && ev.GetType() == host.EventTaskWaitingApproval && f.Note != "" {
		fmt.Fprintf(w.e.stdout, "          approval %s is pending: taskhost approve %s (or reject)\n", f.Note, f.Note)
	}
	w.drawProgress()
}

func (w *watchView) final(t *apipb.Task) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.progress = false
	w.clearProgress()
	switch {
	case w.json:
		newPrinter(w.e, true).emit(map[string]any{"kind": "result", "task": taskJSON(t)})
	case t.GetStatus() == string(store.StatusCompleted):
		fmt.Fprintf(w.e.stdout, "task %s completed: %s\n", t.GetId(), meters(t.GetBudgets()))
		if len(t.GetResult()) > 0 {
			fmt.Fprintf(w.e.stdout, "result: %s\n", inert(string(t.GetResult())))
		}
	case t.GetStatus() == string(store.StatusInterrupted):
		fmt.Fprintf(w.e.stdout, "task %s interrupted (%s)%s\nresume it with: %s %s\n", t.GetId(), t.GetReason(), detail(t.GetMessage()), w.resumeWith, t.GetId())
	default:
		fmt.Fprintf(w.e.stdout, "task %s %s (%s)%s\n", t.GetId(), t.GetStatus(), t.GetReason(), detail(t.GetMessage()))
	}
	return exitForStatus(t.GetStatus())
}

// exitForStatus is the exit code of a watch, run or demo task that ended
// in status: 0 completed, 6 interrupted, 1 failed or cancelled.
func exitForStatus(status string) int {
	switch store.Status(status) {
	case store.StatusCompleted:
		return exitOK
	case store.StatusInterrupted:
		return exitInterrupted
	default:
		return exitFailed
	}
}

// progressLine is the one-line display of the task's state.
func (w *watchView) progressLine() string {
	parts := []string{w.id, w.status}
	if w.attempt != "" {
		parts = append(parts, "attempt "+w.attempt)
	}
	parts = append(parts, "steps "+w.steps, "tools "+w.tools, "models "+w.models)
	if w.promptTokens+w.completionTokens > 0 {
		parts = append(parts, fmt.Sprintf("tokens %d+%d", w.promptTokens, w.completionTokens))
	}
	parts = append(parts, "wall "+w.wall+"s", fmt.Sprintf("watching %.0fs", time.Since(w.start).Seconds()))
	line := strings.Join(parts, " | ")
	// A line that wraps could not be redrawn in place.
	if w.width > 1 && len(line) >= w.width {
		line = line[:w.width-1]
	}
	return line
}

func (w *watchView) drawProgress() {
	if !w.progress {
		return
	}
	fmt.Fprintf(w.e.stdout, "\r\033[2K%s", w.progressLine())
	w.shown = true
}

func (w *watchView) clearProgress() {
	if w.shown {
		fmt.Fprint(w.e.stdout, "\r\033[2K")
		w.shown = false
	}
}

// escapesAllowed reports whether the terminal may be sent escape sequences
// (the redrawn progress line): not when NO_COLOR is set to anything
// (no-color.org: the user wants plain output) or TERM is "dumb".
func escapesAllowed(getenv func(string) string) bool {
	return getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

// terminalWidth reports whether w is a terminal and its width in columns
// (0 when unknown).
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, true
	}
	return int(ws.Col), true
}
