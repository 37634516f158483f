//go:build !linux

package sdk

import (
	"context"
	"errors"
)

var errNoPidfd = errors.New("no pidfd for the parent")

// waitExit has no pidfd to wait on here: the caller polls.
func waitExit(context.Context, int, func() bool) error { return errNoPidfd }
