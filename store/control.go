package store

import (
	"context"
	"errors"
)

// pausable are the statuses Pause moves to interrupted.
var pausable = []Status{StatusPending, StatusRunning, StatusWaitingApproval, StatusBlocked}

// Pause interrupts principal's task id for reason (user_pause): a running
// or waiting task, or one waiting in the queue, becomes interrupted, its
// pending approvals cancelled, with its events, in one transaction. It
// resumes only explicitly. Pausing an interrupted task returns it with a
// nil error and writes nothing; a finished task gives a *TransitionError.
// A running attempt is left for its runner to close (AbandonAttempt), as
// with Cancel.
func (s *Store) Pause(ctx context.Context, principal, id string, reason Reason, events ...NewEvent) (Task, error) {
	return s.moveOnce(ctx, principal, id, pausable, StatusInterrupted, reason, events, nil)
}

// moveOnce moves principal's task id from any of from to to for reason,
// with its events, and runs also (if not nil) in the same transaction. A
// task already in to is returned as it is, nothing written: a repeated
// cancel or pause is harmless. Any other status is a *TransitionError.
func (s *Store) moveOnce(ctx context.Context, principal, id string, from []Status, to Status, reason Reason, events []NewEvent, also func(tx *txn, t Task) error) (Task, error) {
	if err := checkReason(reason); err != nil {
		return Task{}, err
	}
	if err := s.checkEvents(events); err != nil {
		return Task{}, err
	}
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		var stored int64
		var err error
		t, stored, err = s.transition(ctx, tx, principal, id, from, to, reason, "", len(events))
		var te *TransitionError
		if errors.As(err, &te) && te.Current == to {
			t, err = scanTask(tx.QueryRowContext(ctx, qTaskByID, id, principal))
			return err
		}
		if err != nil {
			return err
		}
		if also != nil {
			if err := also(tx, t); err != nil {
				return err
			}
		}
		_, err = s.storeEvents(ctx, tx, t.ID, t.RunID, stored, events)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}
