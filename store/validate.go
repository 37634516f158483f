package store

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Everything a caller passes is checked before a transaction begins, so a
// refused call writes nothing and never holds the write lock.

// checkSize returns a *LimitError naming field when n > limit.
func checkSize(field string, n, limit int) error {
	if n > limit {
		return &LimitError{Field: field, Limit: limit, Got: n}
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func checkReason(r Reason) error {
	if !r.Valid() {
		return invalidf("unknown reason %q", r)
	}
	return nil
}

func (s Status) valid() bool {
	switch s {
	case StatusPending, StatusRunning, StatusWaitingApproval, StatusCompleted,
		StatusFailed, StatusCancelled, StatusInterrupted, StatusBlocked:
		return true
	}
	return false
}

// closed reports whether a is a status an attempt may end in.
func (a AttemptStatus) closed() bool {
	switch a {
	case AttemptCompleted, AttemptFailed, AttemptInterrupted, AttemptCancelled:
		return true
	}
	return false
}

func validOutcome(o string) bool {
	switch o {
	case "", "continue", "complete", "fail":
		return true
	}
	return false
}

// maxEventType bounds an event type name (the schema checks it too).
const maxEventType = 64

// checkEvents validates events to append: a known-size type, and a payload
// that is one JSON object within the limit. A nil or empty payload stands
// for {}.
func (s *Store) checkEvents(events []NewEvent) error {
	for i, e := range events {
		if e.Type == "" || len(e.Type) > maxEventType {
			return invalidf("event %d: type must be 1..%d bytes", i, maxEventType)
		}
		if err := checkSize("event payload", len(e.Payload), s.lim.EventPayload); err != nil {
			return err
		}
		if len(e.Payload) == 0 {
			continue
		}
		p := bytes.TrimLeft(e.Payload, " \t\r\n")
		if len(p) == 0 || p[0] != '{' || !json.Valid(p) {
			return invalidf("event %d (%s): payload is not a JSON object", i, e.Type)
		}
	}
	return nil
}
