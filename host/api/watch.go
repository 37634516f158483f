package api

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// active reports whether a task in status st may still record events without
// an explicit resume.
func active(st store.Status) bool {
	return st == store.StatusPending || st == store.StatusRunning || st == store.StatusWaitingApproval
}

// WatchTask streams a task's events until it stops running. The stream is
// bounded: at most MaxWatchers run at once (MaxWatchesPerPrincipal of one
// principal), each message carries one event
// (at most limits.event_bytes of payload) or one task.
func (ts *taskService) WatchTask(req *apipb.WatchTaskRequest, stream apipb.TaskService_WatchTaskServer) error {
	ctx := stream.Context()
	p, err := principalOf(ctx)
	if err != nil {
		return err
	}
	if err := checkID("task_id", req.TaskId); err != nil {
		return err
	}
	if req.AfterSeq < 0 {
		return invalid("after_seq", "must not be negative")
	}
	select {
	case ts.s.watchers <- struct{}{}:
		defer func() { <-ts.s.watchers }()
	default:
		return statusError(codes.ResourceExhausted, ReasonWatchLimit, fmt.Sprintf("all %d watch streams of this daemon are open; retry later", ts.s.opts.MaxWatchers))
	}
	if err := ts.s.quotas.acquireWatch(p, ts.s.opts.MaxWatchesPerPrincipal); err != nil {
		return err
	}
	defer ts.s.quotas.releaseWatch(p)
	// An admin may watch another principal's task (its watch slot stays
	// the admin's own).
	owner, err := ts.s.owner(ctx, p, req.TaskId, "")
	if err != nil {
		return err
	}
	w := &watcher{s: ts.s, stream: stream, principal: owner, id: req.TaskId, after: req.AfterSeq}
	return w.run(ctx)
}

type watcher struct {
	s         *Server
	stream    apipb.TaskService_WatchTaskServer
	principal string
	id        string
	after     int64
}

func (w *watcher) run(ctx context.Context) error {
	t, err := w.s.opts.Tasks.Get(ctx, w.principal, w.id)
	if err != nil {
		return w.s.toStatus(ctx, err, "task", w.id)
	}
	if err := w.stream.Send(&apipb.WatchTaskResponse{Item: &apipb.WatchTaskResponse_Snapshot{Snapshot: taskPB(t, false)}}); err != nil {
		return err
	}
	// waitCtx ends the wait for new events when the client goes away or
	// the server stops.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.s.closing:
			cancel()
		case <-waitCtx.Done():
		}
	}()
	for {
		if err := w.drain(ctx); err != nil {
			return err
		}
		done, err := w.finishIfStopped(ctx)
		if done || err != nil {
			return err
		}
		// Wait for anything new; drain sends it on the next round.
		if _, err := w.s.opts.Tasks.Events(waitCtx, w.principal, w.id, w.after); err != nil {
			switch {
			case ctx.Err() != nil:
				return status.FromContextError(ctx.Err()).Err()
			case w.s.stopping():
				// The daemon is stopping: what it recorded last (the
				// task interrupted, typically) still goes out.
				if err := w.drain(ctx); err != nil {
					return err
				}
				if done, err := w.finishIfStopped(ctx); done || err != nil {
					return err
				}
				return errClosing()
			}
			return w.s.toStatus(ctx, err, "task", w.id)
		}
	}
}

// drain sends every recorded event after w.after.
func (w *watcher) drain(ctx context.Context) error {
	for {
		evs, err := w.s.opts.Events.Events(ctx, w.principal, w.id, w.after, eventBatch)
		if err != nil {
			return w.s.toStatus(ctx, err, "task", w.id)
		}
		for _, e := range evs {
			if err := w.stream.Send(&apipb.WatchTaskResponse{Item: &apipb.WatchTaskResponse_Event{Event: eventPB(e)}}); err != nil {
				return err
			}
			w.after = e.Seq
		}
		if len(evs) < eventBatch {
			return nil
		}
	}
}

// finishIfStopped sends the final task and reports done once the task has
// stopped running. Events recorded with the status change are in the same
// transaction, so a drain after reading the status sends them all.
func (w *watcher) finishIfStopped(ctx context.Context) (bool, error) {
	t, err := w.s.opts.Tasks.Get(ctx, w.principal, w.id)
	if err != nil {
		return false, w.s.toStatus(ctx, err, "task", w.id)
	}
	if active(t.Status) {
		return false, nil
	}
	if err := w.drain(ctx); err != nil {
		return false, err
	}
	return true, w.stream.Send(&apipb.WatchTaskResponse{Item: &apipb.WatchTaskResponse_Final{Final: taskPB(t, true)}})
}
