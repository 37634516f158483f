package store

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid: an argument is malformed (unknown status, illegal
	// transition pair, empty id, payload that is not a JSON object, ...).
	// Nothing was written.
	ErrInvalid = errors.New("invalid argument")
	// ErrReadOnly: a write was asked of a store opened with
	// Options.ReadOnly, or SQLite refused to write to the file.
	ErrReadOnly = errors.New("store is read-only")
	// ErrUnavailable: SQLite could not write (the disk is full, an I/O
	// error). Nothing was written; the same write may succeed later. It is
	// always an *UnavailableError, which names the class of the cause.
	ErrUnavailable = errors.New("store unavailable")
	// ErrFenced: a write carried a stale lease epoch (run id): the task has
	// been taken over by a newer run, on this host or another. Nothing was
	// written; the writer's run must stop without touching the task. It is
	// always a *TransitionError (which also matches ErrConflict).
	ErrFenced = errors.New("lease lost: the run was superseded")
)

// UnavailableError is a write the store could not make for a cause outside
// the request: Class is "disk full" or "I/O error", for clients and logs.
type UnavailableError struct {
	Class string
	Err   error
}

func (e *UnavailableError) Error() string {
	return "store unavailable: " + e.Class + ": " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// OpenError is a refusal to open a store file. Open fails closed: any doubt
// about the file (location, permissions, format, integrity, schema version)
// is an OpenError that names the file or directory and says what to do next.
type OpenError struct {
	Path string // the store file
	// Op names the check that failed: "options", "data dir", "file",
	// "read-only", "format", "integrity", "schema", "migrate" or "sqlite".
	Op   string
	Err  error  // what is wrong; names the file or directory
	Hint string // what the operator should do next
}

func (e *OpenError) Error() string {
	if e.Hint == "" {
		return fmt.Sprintf("open store %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("open store %s: %v; %s", e.Path, e.Err, e.Hint)
}

func (e *OpenError) Unwrap() error { return e.Err }

// sentinelErr is a message that matches a sentinel with errors.Is without
// repeating the sentinel's text.
type sentinelErr struct {
	msg string
	is  error
}

func (e *sentinelErr) Error() string { return e.msg }
func (e *sentinelErr) Unwrap() error { return e.is }
