package tools

import (
	"context"
	"time"
)

func bindSleep(c *call) (action, error) {
	var secs float64
	present, err := c.decode("seconds", "a number", &secs)
	if err = c.required("seconds", present, err); err != nil {
		return nil, err
	}
	if secs < 0 || secs > c.timeout.Seconds() {
		return nil, c.argErr("seconds", "is %g; it must be in 0..%g (the tool's timeout)", secs, c.timeout.Seconds())
	}
	d := time.Duration(secs * float64(time.Second))
	return func(ctx context.Context) (Result, error) {
		// Sleep until c.start+d, not for d from now: Call set the deadline
		// after c.start, so a sleep of exactly the timeout ends no later
		// than the deadline fires.
		end := c.start.Add(d)
		timer := time.NewTimer(time.Until(end))
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			// The tool's own deadline firing at the very moment the
			// sleep is due is a tie, not a timeout: the time asked for
			// (at most the timeout, checked above) has passed.
			_, ours := context.Cause(ctx).(*timeoutError)
			if !ours || time.Now().Before(end) {
				return Result{}, context.Cause(ctx)
			}
		}
		return Result{Output: mustJSON(struct {
			Slept float64 `json:"slept"`
		}{secs})}, nil
	}, nil
}
