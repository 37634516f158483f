package legacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
)

const (
	// noProgressRun is how many identical consecutive summaries fail a task.
	noProgressRun = 3
	// maxStoredSummaries bounds last_summaries in a checkpoint read. It is
	// one more than the executor writes (noProgressRun-1), so a checkpoint
	// that also keeps the current step's summary is still accepted.
	maxStoredSummaries = noProgressRun
)

// state is the checkpoint payload: what the next step needs and nothing
// more. Holding only the summaries of the no-progress rule keeps it bounded
// (a few summaries of at most maxSummaryRunes each) however long the task.
type state struct {
	// LastSummaries are the summaries of the latest steps, oldest first.
	LastSummaries []string `json:"last_summaries"`
	// StepsDone counts the completed steps.
	StepsDone int `json:"steps_done"`
}

// loadState reads a checkpoint; nil is a task's first step. A checkpoint
// this executor did not write fails rather than starting again from zero,
// which would repeat the task's effects.
func loadState(cp *sdk.Checkpoint) (state, error) {
	if cp == nil {
		return state{}, nil
	}
	if cp.Schema != CheckpointSchema {
		return state{}, fmt.Errorf("schema %q is not %q", cp.Schema, CheckpointSchema)
	}
	var st state
	dec := json.NewDecoder(bytes.NewReader(cp.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return state{}, fmt.Errorf("payload: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return state{}, errors.New("payload: trailing data after the JSON object")
	}
	if st.StepsDone < 0 {
		return state{}, fmt.Errorf("payload: steps_done is %d", st.StepsDone)
	}
	if len(st.LastSummaries) > maxStoredSummaries {
		return state{}, fmt.Errorf("payload: %d last_summaries, at most %d", len(st.LastSummaries), maxStoredSummaries)
	}
	for i, s := range st.LastSummaries {
		if utf8.RuneCountInString(s) > maxSummaryRunes {
			return state{}, fmt.Errorf("payload: last_summaries[%d] is longer than %d characters", i, maxSummaryRunes)
		}
	}
	return st, nil
}

// repeats counts the consecutive steps, this one included, that ended with
// summary.
func (st state) repeats(summary string) int {
	n := 1
	for i := len(st.LastSummaries) - 1; i >= 0 && st.LastSummaries[i] == summary; i-- {
		n++
	}
	return n
}

// advance is the state after a step that ended with summary.
func (st state) advance(summary string) state {
	last := append(append([]string(nil), st.LastSummaries...), summary)
	if keep := noProgressRun - 1; len(last) > keep {
		last = last[len(last)-keep:]
	}
	return state{LastSummaries: last, StepsDone: st.StepsDone + 1}
}

func (st state) checkpoint() (*sdk.Checkpoint, error) {
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("legacy: checkpoint: %w", err)
	}
	return &sdk.Checkpoint{Schema: CheckpointSchema, Payload: payload}, nil
}
