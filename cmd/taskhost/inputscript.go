package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// Bounds of `taskhost run --input-values`: at most maxInputValues answers,
// each one JSON value of at most host.MaxInputValue bytes, as an approval
// takes it.
const (
	maxInputValues    = 64
	maxInputFileBytes = maxInputValues*(host.MaxInputValue+2) + 2
)

// inputScript is the answers of `taskhost run --input-values`, given to the
// task's input questions in the order they are asked. A question past them
// is rejected: a script that is too short fails the task instead of
// answering null.
type inputScript struct {
	values [][]byte
	next   int
}

// readInputScript reads a file holding one JSON array of the answers.
func readInputScript(path string) (*inputScript, error) {
	data, err := readInputFile("--input-values", path, maxInputFileBytes)
	if err != nil {
		return nil, err
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("--input-values %s: must hold one JSON array of the answers: %v", path, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("--input-values %s: must hold one JSON array of the answers, not null ([] rejects every question)", path)
	}
	if len(raw) > maxInputValues {
		return nil, fmt.Errorf("--input-values %s: holds %d values, the limit is %d", path, len(raw), maxInputValues)
	}
	s := &inputScript{}
	for i, v := range raw {
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			return nil, fmt.Errorf("--input-values %s: value %d: %v", path, i+1, err)
		}
		if b.Len() > host.MaxInputValue {
			return nil, fmt.Errorf("--input-values %s: value %d is %d bytes, the limit is %d", path, i+1, b.Len(), host.MaxInputValue)
		}
		s.values = append(s.values, b.Bytes())
	}
	return s, nil
}

// inputScriptExhausted is the notice of a question past the script; the
// conformance kit (sdk/executortest) looks for it.
const inputScriptExhausted = "rejected: no answer left in --input-values"

// answer answers input approval a with the script's next value, or rejects
// it when none is left, saying so on stderr.
func (d *decider) answer(ctx context.Context, a *apipb.Approval) {
	what := approvalText("", a.Prompt)
	s := d.inputs
	if s.next >= len(s.values) {
		fmt.Fprintf(d.e.stderr, "input %s: %s — %s (question %d; the file holds %d)\n", a.Id, what, inputScriptExhausted, s.next+1, len(s.values))
		s.next++
		d.resolve(ctx, a.Id, false, "")
		return
	}
	v := s.values[s.next]
	s.next++
	fmt.Fprintf(d.e.stderr, "input %s: %s — answered with value %d of --input-values\n", a.Id, what, s.next)
	d.resolve(ctx, a.Id, true, string(v))
}
