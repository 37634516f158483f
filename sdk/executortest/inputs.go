package executortest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// inputExhausted is how `taskhost run --input-values` says, on its stderr,
// that it rejected a question because the file held no answer left for it.
const inputExhausted = "rejected: no answer left in --input-values"

// inputArgs returns the --input-values flag that answers scenario's
// questions with Options.Inputs, from the answer after the first used ones
// on (a run before this one took those), or no flag when the scenario has
// no script.
func (h *host) inputArgs(scenario string, used int) ([]string, error) {
	if h.k.opts.Inputs == nil {
		return nil, nil
	}
	values, err := scriptedInputs(scenario, h.k.opts.Inputs(scenario))
	if err != nil || values == nil {
		return nil, err
	}
	values = values[min(used, len(values)):]
	data, err := json.Marshal(values)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(h.specs, scenario+"-inputs-*.json")
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return nil, err
	}
	return []string{"--input-values", f.Name()}, f.Close()
}

// answered counts the input questions the task's ledger shows answered,
// each once: a re-run of a step replays the answers its killed attempt
// got, and asks again only what the kill cut off.
func answered(v inspectView) int {
	n := 0
	for _, e := range v.Effects {
		if e.Kind == "approval" && e.Summary == "input" && e.Status == "observed" && !e.Replayed {
			n++
		}
	}
	return n
}

// checkInputs fails the check when s's host rejected a question that
// Options.Inputs had no answer left for, quoting the host's line.
func (k *kit) checkInputs(t *testing.T, s *session) {
	t.Helper()
	if s.scenario == "" {
		return
	}
	for line := range strings.SplitSeq(s.stderr.String(), "\n") {
		if strings.Contains(line, inputExhausted) {
			t.Errorf("the %q task asked an input question past the answers Options.Inputs(%q) gives; the host rejected it, which fails the task (approval_rejected):\n    %s\n"+
				"Add an answer to the scenario's script, in the order the questions are asked.", s.scenario, s.scenario, line)
		}
	}
}

// mustResume resumes the task id of scenario with `taskhost run --resume`,
// giving it the answers of Options.Inputs the task has not used yet, and
// returns the session and its exit code.
func (k *kit) mustResume(ctx context.Context, t *testing.T, h *host, scenario, id string) (*session, int) {
	t.Helper()
	v, err := h.inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	in, err := h.inputArgs(scenario, answered(v))
	if err != nil {
		t.Fatalf("Options.Inputs(%q): %v", scenario, err)
	}
	s, code, err := h.run(ctx, t, append([]string{"--resume", id}, in...)...)
	if err != nil {
		t.Fatalf("taskhost run --resume %s: %v", id, err)
	}
	s.scenario = scenario
	k.checkInputs(t, s)
	return s, code
}

// errInputs names the option for a failure to write a scenario's answers.
func errInputs(scenario string, err error) error {
	return fmt.Errorf("Options.Inputs(%q): %w", scenario, err)
}
