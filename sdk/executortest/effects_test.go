package executortest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestCountCalls checks the count the effect check judges by, on ledgers
// as `taskhost inspect --effects` prints them: a replay counts as a call
// but not a run, a call of a killed attempt run again counts twice, a keyed
// idempotent call once, and a tool that changes nothing not at all, nor a
// killed attempt's run of one whose work the resume rolls back.
func TestCountCalls(t *testing.T) {
	t.Parallel()
	const write = "task.create{spec:9B}"
	const wsWrite = "workspace.write{append:4B,content:6B,path:3B}"
	attempts := []attemptView{{Attempt: 1, Status: "completed"}, {Attempt: 2, Status: "interrupted"}, {Attempt: 3, Status: "completed"}, {Attempt: 4, Status: "completed"}}
	eff := func(attempt, seq int64, summary, status string, replayed bool) ledgerEffect {
		return ledgerEffect{Attempt: attempt, Seq: seq, Kind: "tool", Summary: summary, Status: status, Replayed: replayed, Fingerprint: "f"}
	}
	keyed := func(attempt int64, key string) ledgerEffect {
		e := eff(attempt, 1, write+idempotentMark, "observed", false)
		e.IdempotencyKey = key
		return e
	}
	cases := []struct {
		name                  string
		effects               []ledgerEffect
		call                  string
		ran, calls, replayed  int
		inDoubt, step, nCalls int
		repeated              bool
	}{
		{"replayed", []ledgerEffect{eff(2, 1, write, "observed", false), eff(3, 1, write, "observed", true)}, "task.create", 1, 1, 1, 0, 2, 1, false},
		{"run again", []ledgerEffect{eff(2, 1, write, "observed", false), eff(3, 1, write, "observed", false)}, "task.create", 2, 1, 0, 0, 2, 1, true},
		{"cut off, then run", []ledgerEffect{eff(2, 1, write, "indeterminate", false), eff(3, 1, write, "observed", false)}, "task.create", 1, 1, 0, 1, 2, 1, false},
		{"keyed twice", []ledgerEffect{keyed(2, "k"), keyed(3, "k")}, `task.create key "k"`, 1, 1, 0, 0, 2, 1, false},
		{"two keys", []ledgerEffect{keyed(2, "a"), keyed(3, "b")}, `task.create key "a"`, 1, 0, 0, 0, 2, 2, false},
		{"a later step's own call", []ledgerEffect{eff(3, 1, write, "observed", false), eff(4, 1, write, "observed", false)}, "task.create", 1, 1, 0, 0, 3, 1, false},
		{"a workspace write run again after its rollback", []ledgerEffect{eff(2, 1, wsWrite, "observed", false), eff(3, 1, wsWrite, "observed", false)}, "workspace.write", 1, 1, 0, 0, 2, 1, false},
		{"no side effect", []ledgerEffect{eff(2, 1, "time.sleep{seconds:1B}", "observed", false), eff(3, 1, "time.sleep{seconds:1B}", "observed", false)}, "", 0, 0, 0, 0, 2, 0, false},
		{"model calls are not tool calls", []ledgerEffect{{Attempt: 2, Seq: 1, Kind: "model", Summary: "model{messages:1,tools:0,depth:1}", Status: "observed"}}, "", 0, 0, 0, 0, 2, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			steps := countCalls(inspectView{Attempts: attempts, Effects: c.effects})
			if got := len(steps[c.step]); got != c.nCalls {
				t.Fatalf("step %d has %d calls, want %d: %+v", c.step, got, c.nCalls, steps)
			}
			if c.nCalls == 0 {
				return
			}
			cc := steps[c.step][c.call]
			if cc == nil {
				t.Fatalf("no call %q in step %d: %+v", c.call, c.step, steps[c.step])
			}
			if len(cc.ran) != c.ran || cc.calls != c.calls || cc.replayed != c.replayed || len(cc.inDoubt) != c.inDoubt {
				t.Errorf("ran %d, calls %d, replayed %d, in doubt %d; want %d, %d, %d, %d", len(cc.ran), cc.calls, cc.replayed, len(cc.inDoubt), c.ran, c.calls, c.replayed, c.inDoubt)
			}
			if got := cc.repeated(); got != c.repeated {
				t.Errorf("repeated() = %v, want %v", got, c.repeated)
			}
		})
	}
}

// TestValidateInputs checks Options.Inputs's bounds, which are those of
// `taskhost run --input-values`, at each limit and one past it.
func TestValidateInputs(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	answers := func(n int) []any { return make([]any, n) }
	cases := []struct {
		name    string
		values  []any
		wantErr string
	}{
		{"nil", nil, ""},
		{"none", []any{}, ""},
		{"64 answers", answers(maxInputs), ""},
		{"65 answers", answers(maxInputs + 1), `Options.Inputs("complete") has 65 answers, the limit is 64`},
		{"an answer of 64 KiB", []any{strings.Repeat("x", maxInputBytes-2)}, ""}, // the quotes make it 64 KiB
		{"an answer a byte over", []any{strings.Repeat("x", maxInputBytes-1)}, `Options.Inputs("complete"): answer 1 is 65537 bytes as JSON, the limit is 65536`},
		{"not JSON", []any{"ok", make(chan int)}, `Options.Inputs("complete"): answer 2: json: unsupported type`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{
				Binary: self, Kind: "k", TaskhostBin: self,
				Spec: func(string) map[string]any { return map[string]any{} },
				Inputs: func(scenario string) []any {
					if scenario == ScenarioComplete {
						return c.values
					}
					return nil
				},
			}
			_, err := o.validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("validate: %v\nwant an error with %q", err, c.wantErr)
			}
		})
	}
}

func TestResultEquals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		want    any
		got     string
		wantErr string
	}{
		{"same", map[string]any{"a": 1, "b": []string{"x"}}, `{"b":["x"],"a":1}`, ""},
		{"spacing", json.RawMessage(`{"a": 1}`), `{ "a":1 }`, ""},
		{"differs", map[string]int{"steps": 3}, `{"steps":4}`, `the result is {"steps":4}, want {"steps":3}`},
		{"not JSON", map[string]int{"steps": 3}, `{`, `the result is {, want {"steps":3}`},
		{"want not marshallable", make(chan int), `{}`, "ResultEquals: the wanted value cannot be marshalled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ResultEquals(c.want)(json.RawMessage(c.got))
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("ResultEquals: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("ResultEquals: %v\nwant an error with %q", err, c.wantErr)
			}
		})
	}
}
