package legacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

const (
	defaultMaxRounds = 8
	minMaxRounds     = 1
	maxMaxRounds     = 32
	// The opt-in no-progress rule needs a run of at least two to mean
	// anything; a bound keeps the spec honest about what it asks for.
	minIdenticalSummaries = 2
	maxIdenticalSummaries = 100
)

// spec is a task spec as the legacy executor reads it.
type spec struct {
	Goal   string
	Legacy options
}

// options are the fields of the spec's "legacy" object.
type options struct {
	// MaxRounds bounds the model calls of one turn.
	MaxRounds int
	// StopAfterIdenticalSummaries, when not 0, fails the task with
	// no_progress once that many consecutive unfinished steps ended with
	// the same summary. Zara has no such rule, so it is off by default.
	StopAfterIdenticalSummaries int
}

// The fields "legacy" may have.
const (
	optMaxRounds                   = "max_rounds"
	optStopAfterIdenticalSummaries = "stop_after_identical_summaries"
)

// parseSpec reads a spec. The "legacy" object is checked strictly, so that a
// misspelt option fails the task instead of silently doing nothing; other
// top-level fields belong to the host or to other executors. No error
// quotes the goal.
func parseSpec(raw []byte) (spec, error) {
	var top struct {
		Goal   *string         `json:"goal"`
		Legacy json.RawMessage `json:"legacy"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return spec{}, fmt.Errorf("not a JSON object with a string goal: %w", err)
	}
	if top.Goal == nil || strings.TrimSpace(*top.Goal) == "" {
		return spec{}, errors.New("goal is missing or empty")
	}
	opts, err := parseOptions(top.Legacy)
	if err != nil {
		return spec{}, err
	}
	return spec{Goal: *top.Goal, Legacy: opts}, nil
}

// parseOptions reads the "legacy" object; absent or null means defaults.
func parseOptions(raw json.RawMessage) (options, error) {
	opts := options{MaxRounds: defaultMaxRounds}
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return opts, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return options{}, errors.New("legacy: must be a JSON object")
	}
	// Named one by one, in a stable order, rather than through
	// DisallowUnknownFields, whose error reports only the first.
	var unknown []string
	for name := range fields {
		if name != optMaxRounds && name != optStopAfterIdenticalSummaries {
			unknown = append(unknown, fmt.Sprintf("%q", "legacy."+name))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return options{}, fmt.Errorf("unknown field %s (known: legacy.%s, legacy.%s)", strings.Join(unknown, ", "), optMaxRounds, optStopAfterIdenticalSummaries)
	}
	var err error
	if opts.MaxRounds, err = intOption(fields, optMaxRounds, defaultMaxRounds, minMaxRounds, maxMaxRounds); err != nil {
		return options{}, err
	}
	// 0 says "off" as absence does; 1 would fail every task at its first
	// unfinished step, so it is refused with the range.
	if opts.StopAfterIdenticalSummaries, err = intOption(fields, optStopAfterIdenticalSummaries, 0, 0, maxIdenticalSummaries); err != nil {
		return options{}, err
	}
	if n := opts.StopAfterIdenticalSummaries; n != 0 && n < minIdenticalSummaries {
		return options{}, fmt.Errorf("legacy.%s: is %d, must be 0 (off) or %d..%d", optStopAfterIdenticalSummaries, n, minIdenticalSummaries, maxIdenticalSummaries)
	}
	return opts, nil
}

// intOption reads the integer field name of "legacy", def when absent.
func intOption(fields map[string]json.RawMessage, name string, def, lo, hi int) (int, error) {
	v, ok := fields[name]
	if !ok {
		return def, nil
	}
	var n int
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, fmt.Errorf("legacy.%s: must be an integer: %w", name, err)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("legacy.%s: is %d, must be %d..%d", name, n, lo, hi)
	}
	return n, nil
}
