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
	return s.moveOnce(ctx, &moveParams{PrincipalID: principal, TaskID: id, From: pausable, To: StatusInterrupted, Reason: reason, Events: events})
}

// moveParams is a move of principal's task from any of From to To for
// Reason, with its Events; Also, if set, runs in the same transaction.
type moveParams struct {
	PrincipalID string
	TaskID      string
	From        []Status
	To          Status
	Reason      Reason
	Events      []NewEvent
	Also        func(tx *txn, t Task) error
}

// moveOnce makes move p. A task already in p.To is returned as it is,
// nothing written: a repeated cancel or pause is harmless. Any other
// status is a *TransitionError.
func (s *Store) moveOnce(ctx context.Context, p *moveParams) (Task, error) {
	if err := checkReason(p.Reason); err != nil {
		return Task{}, err
	}
	if err := s.checkEvents(p.Events); err != nil {
		return Task{}, err
	}
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		var stored int64
		var err error
		t, stored, err = s.transition(ctx, tx, &transitionParams{PrincipalID: p.PrincipalID, TaskID: p.TaskID,
			From: p.From, To: p.To, Reason: p.Reason, Events: len(p.Events)})
		var te *TransitionError
		if errors.As(err, &te) && te.Current == p.To {
			t, err = scanTask(tx.QueryRowContext(ctx, qTaskByID, p.TaskID, p.PrincipalID))
			return err
		}
		if err != nil {
			return err
		}
		if p.Also != nil {
			if err := p.Also(tx, t); err != nil {
				return err
			}
		}
		_, err = s.storeEvents(ctx, tx, t.ID, t.RunID, stored, p.Events)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}
