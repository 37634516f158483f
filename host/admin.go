package host

import (
	"context"
	"fmt"
)

// EventAdminAct records that an admin principal acted on another
// principal's task: the act and who, before the act's own events.
const EventAdminAct = "task.admin_act"

// Admin acts an admin may take on any principal's task.
const (
	AdminResume = "resume"
	AdminCancel = "cancel"
)

// AdminAct prepares admin's act on task id: it returns the task's owner,
// and when that is not admin, first records the act and the admin in the
// task's events (EventAdminAct), so that the act cannot happen unrecorded:
// if the record cannot be written, the error is returned and the caller
// must not act. A missing task is store.ErrNotFound.
func (r *Runner) AdminAct(ctx context.Context, admin, id, act string) (owner string, err error) {
	owner, err = r.store.TaskOwner(ctx, id)
	if err != nil || owner == admin {
		return owner, err
	}
	t, err := r.store.GetTask(ctx, owner, id)
	if err != nil {
		return "", err
	}
	t = r.liveMeters(t)
	ev := newEvent(EventAdminAct, t, EventPayload{By: admin, Note: fmt.Sprintf("%s requested by admin %s", act, admin)})
	_, err = r.store.AppendEvents(ctx, owner, id, t.RunID, ev)
	r.notify()
	if err != nil {
		return "", fmt.Errorf("recording the admin's %s of task %s: %w", act, id, err)
	}
	r.log.Info("admin act", "admin", admin, "act", act, "task", id, "owner", owner)
	return owner, nil
}

// TaskOwner returns the principal of task id, for an admin's read.
func (r *Runner) TaskOwner(ctx context.Context, id string) (string, error) {
	return r.store.TaskOwner(ctx, id)
}
