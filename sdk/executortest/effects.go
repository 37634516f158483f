package executortest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/text"
)

// ledgerEffect is one row of a task's effect ledger, as `taskhost inspect
// --effects --json ID` prints it: every model call, tool call and approval
// the host ran, replayed or refused for the task, in every attempt.
type ledgerEffect struct {
	Attempt        int64  `json:"attempt"`
	Seq            int64  `json:"seq"`
	Kind           string `json:"kind"`
	Status         string `json:"status"`
	Summary        string `json:"summary"`
	Fingerprint    string `json:"fingerprint"`
	IdempotencyKey string `json:"idempotency_key"`
	Replayed       bool   `json:"replayed"`
	Resolution     string `json:"resolution"`
}

// idempotentMark ends the ledger summary of a tool call the executor
// marked idempotent under its key, which the tool de-duplicates by.
const idempotentMark = " (idempotent)"

// sideEffectFree are the tools that change nothing: running one again
// repeats no effect, so the count leaves them out.
var sideEffectFree = []string{"workspace.read", "workspace.list", "time.sleep", "task.list", "task.status"}

// rolledBack are the tools whose runs in an attempt that died the host
// undoes: the resume restores the task's workspace as of its last
// committed step and runs them again (docs/operations.md, "Workspaces live
// in the store"), so such a run is no repeat.
var rolledBack = []string{"workspace.write", "shell.run"}

func (e ledgerEffect) tool() string {
	name, _, _ := strings.Cut(e.Summary, "{")
	name, _, _ = strings.Cut(name, "(")
	return name
}

func (e ledgerEffect) String() string {
	s := fmt.Sprintf("attempt %d seq %d %s %s", e.Attempt, e.Seq, text.Clip(e.Summary, 120), e.Status)
	if e.Replayed {
		s += " (replayed)"
	}
	return s
}

// callCount is what the ledger shows of one tool call in one step: the
// tool runs it made (observed, and in doubt: cut off in flight) over all
// the step's attempts, and how often the attempt that completed the step
// made the call (its runs and its replays).
type callCount struct {
	call     string // the tool's summary, and the key of a keyed call
	ran      []ledgerEffect
	inDoubt  []ledgerEffect
	calls    int
	replayed int
}

// repeated reports whether the call ran more often than the step made it:
// a run of a killed attempt that its re-run did not replay. A call that ran
// once never repeated, even when the re-run went another way.
func (c *callCount) repeated() bool { return len(c.ran) > max(c.calls, 1) }

// countCalls groups the task's tool effects by step (the attempts between
// two completed ones, the completed one last) and by call: the tool, and
// for a call marked idempotent its key, which the tool de-duplicates by,
// so that its repeats count as one run.
func countCalls(v inspectView) map[int]map[string]*callCount {
	stepOf, final := map[int64]int{}, map[int]int64{}
	step := 1
	for _, a := range v.Attempts {
		stepOf[a.Attempt] = step
		final[step] = a.Attempt
		if a.Status == "completed" {
			step++
		}
	}
	steps := map[int]map[string]*callCount{}
	for _, e := range v.Effects {
		if e.Kind != "tool" || slices.Contains(sideEffectFree, e.tool()) {
			continue
		}
		s := stepOf[e.Attempt]
		if e.Attempt != final[s] && slices.Contains(rolledBack, e.tool()) {
			continue
		}
		id, keyed := e.tool(), strings.HasSuffix(e.Summary, idempotentMark)
		if keyed {
			id += " key " + fmt.Sprintf("%q", text.Clip(e.IdempotencyKey, 128))
		}
		if steps[s] == nil {
			steps[s] = map[string]*callCount{}
		}
		c := steps[s][id]
		if c == nil {
			c = &callCount{call: id}
			steps[s][id] = c
		}
		if e.Attempt == final[s] {
			c.calls++
			if e.Replayed {
				c.replayed++
			}
		}
		switch {
		case e.Replayed:
		case e.Status == "observed" && !(keyed && len(c.ran) > 0):
			c.ran = append(c.ran, e)
		case e.Status == "indeterminate" || e.Status == "dispatching":
			c.inDoubt = append(c.inDoubt, e)
		}
	}
	return steps
}

// checkEffects checks, after a crash and a resume, that no effect of the
// task ran twice for one call: each tool call that ran in an attempt that
// died must be replayed by the re-run of its step (the same call at the same
// place), not run again. A tool the host lets run again because it changes
// nothing is not counted, nor a killed attempt's run of one whose work the
// resume rolls back (rolledBack), and a keyed call the tool de-duplicates counts
// once. how names the crash, for the message.
func (k *kit) checkEffects(t *testing.T, scenario, how string, v inspectView) {
	t.Helper()
	ran, replayed, inDoubt, repeated := 0, 0, 0, 0
	steps := countCalls(v)
	for _, s := range slices.Sorted(maps.Keys(steps)) {
		for _, id := range slices.Sorted(maps.Keys(steps[s])) {
			c := steps[s][id]
			ran, replayed, inDoubt = ran+len(c.ran), replayed+c.replayed, inDoubt+len(c.inDoubt)
			if !c.repeated() {
				continue
			}
			repeated++
			t.Errorf("after %s, the %q task's step %d ran the tool call %s %d times (%s), but the attempt that completed the step made that call %d time(s), %d of them replayed: an effect repeated. "+
				"Each call a killed attempt made must be made again the same way (the same tool and arguments, in the same order), so that the host replays its answer instead of running it; "+
				"or give it an IdempotencyKey with Idempotent on a tool that honours it, or check req.Indeterminate and skip what was done.",
				how, scenario, s, c.call, len(c.ran), effectList(c.ran), c.calls, c.replayed)
		}
	}
	if ran+replayed+inDoubt == 0 {
		k.note(t, "no tool call with a side effect ran in the %q task (%s): the effect count had nothing to count. "+
			"To test your re-runs, let the scenario's second step make its effect (a tool call) before its slow part.", scenario, how)
		return
	}
	k.note(t, "tool calls with side effects (%s): %d ran, %d replayed, %d cut off in flight; %d ran more often than called", how, ran, replayed, inDoubt, repeated)
}

func effectList(effs []ledgerEffect) string {
	parts := make([]string, 0, len(effs))
	for _, e := range effs {
		parts = append(parts, e.String())
	}
	return strings.Join(parts, ", ")
}

// checkResult checks a completed task's result against Options.Result.
func (k *kit) checkResult(t *testing.T, scenario, how string, v inspectView) {
	t.Helper()
	if k.opts.Result == nil || v.Task.Status != "completed" {
		return
	}
	check := k.opts.Result(scenario)
	if check == nil {
		return
	}
	if err := check(v.Task.Result); err != nil {
		t.Errorf("%s, the %q task's result is not what Options.Result(%q) expects: %v%s%s", how, scenario, scenario, err, v.attemptLines(), v.effectLines())
	}
}
