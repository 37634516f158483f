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

// maxStoredSummaries bounds last_summaries in a checkpoint read. The
// executor writes one; executors before 1.1.0 wrote up to two for their
// no-progress rule, and a third is tolerated as they tolerated it.
const maxStoredSummaries = 3

// state is the checkpoint payload: what the next step needs and nothing
// more. It holds one summary of at most maxSummaryRunes, however long the
// task; the context's summaries come from the host (StepRequest.Recent).
type state struct {
	// LastSummaries ends with the latest step's summary (older entries are
	// left by executors before 1.1.0).
	LastSummaries []string `json:"last_summaries"`
	// StepsDone counts the completed steps: the step being run is
	// StepsDone+1, whatever the host's attempt count.
	StepsDone int `json:"steps_done"`
	// Repeats counts the consecutive steps, up to the latest, that ended
	// with the latest summary; 0 in a checkpoint of an executor before
	// 1.1.0, which is then counted from LastSummaries.
	Repeats int `json:"repeats,omitempty"`
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
	if st.Repeats < 0 || st.Repeats > st.StepsDone {
		return state{}, fmt.Errorf("payload: repeats is %d with steps_done %d", st.Repeats, st.StepsDone)
	}
	if len(st.LastSummaries) > maxStoredSummaries {
		return state{}, fmt.Errorf("payload: %d last_summaries, at most %d", len(st.LastSummaries), maxStoredSummaries)
	}
	for i, s := range st.LastSummaries {
		if utf8.RuneCountInString(s) > maxSummaryRunes {
			return state{}, fmt.Errorf("payload: last_summaries[%d] is longer than %d characters", i, maxSummaryRunes)
		}
	}
	if st.Repeats == 0 {
		// Written before 1.1.0: the run is what the summaries show.
		for i := len(st.LastSummaries) - 1; i >= 0 && st.LastSummaries[i] == st.LastSummaries[len(st.LastSummaries)-1]; i-- {
			st.Repeats++
		}
	}
	return st, nil
}

// repeats counts the consecutive steps, this one included, that ended with
// summary.
func (st state) repeats(summary string) int {
	if n := len(st.LastSummaries); n > 0 && st.LastSummaries[n-1] == summary {
		return st.Repeats + 1
	}
	return 1
}

// advance is the state after a step that ended with summary.
func (st state) advance(summary string) state {
	return state{LastSummaries: []string{summary}, StepsDone: st.StepsDone + 1, Repeats: st.repeats(summary)}
}

func (st state) checkpoint() (*sdk.Checkpoint, error) {
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("legacy: checkpoint: %w", err)
	}
	return &sdk.Checkpoint{Schema: CheckpointSchema, Payload: payload}, nil
}
