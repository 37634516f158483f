package host

import (
	"testing"
	"time"
)

// A streamed call's progress events: at most one a second, then ever more
// rarely, so that a long call adds a few dozen events, not one a second.
func TestProgressDue(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1e9, 0)
	for _, tc := range []struct {
		name    string
		last    time.Time
		now     time.Time
		elapsed time.Duration
		due     bool
	}{
		{"first report", time.Time{}, t0, 200 * time.Millisecond, true},
		{"under a second after the last", t0, t0.Add(999 * time.Millisecond), 5 * time.Second, false},
		{"a second after the last", t0, t0.Add(time.Second), 5 * time.Second, true},
		{"a minute in: every 6 s", t0, t0.Add(5 * time.Second), time.Minute, false},
		{"a minute in, 6 s after", t0, t0.Add(6 * time.Second), time.Minute, true},
	} {
		if got := progressDue(tc.last, tc.now, tc.elapsed); got != tc.due {
			t.Errorf("%s: due = %v, want %v", tc.name, got, tc.due)
		}
	}
	// A 10-minute call reported every second by the provider.
	var last time.Time
	events := 0
	for s := 1; s <= 600; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		if progressDue(last, now, time.Duration(s)*time.Second) {
			last = now
			events++
		}
	}
	if events < 10 || events > 60 {
		t.Errorf("a 600 s call made %d progress events, want 10..60", events)
	}
	t.Logf("a 600 s call: %d progress events", events)
}
