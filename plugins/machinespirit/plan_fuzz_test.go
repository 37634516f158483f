package machinespirit

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzPlanParser feeds root-model replies — plans valid and broken, Prolog
// goals, JSON that is deep, wide, huge in numbers or full of keys — to the
// real worker as the first reply of an rlm task whose second reply is a
// plan with only final("done"). Whatever the reply, the worker stays the
// same process, every step answers, and the task completes: with "done",
// or with a final answer of the reply's own.
func FuzzPlanParser(f *testing.F) {
	needSwipl(f)
	for _, s := range []string{
		plan(step{"op": "length", "as": "n"}),
		plan(step{"op": "search", "pattern": "a+", "mode": "regex", "as": "h"}),
		plan(step{"op": "search", "pattern": "(a+)+$", "mode": "regex", "as": "h"}),
		plan(step{"op": "search", "pattern": "", "as": "h"}),
		plan(step{"op": "partition", "chunk_bytes": 64, "as": "c"}, step{"op": "map", "over": "c", "prompt": "{{item}}", "parallel": 4, "as": "a"}),
		plan(step{"op": "query", "prompt": "{{{{item}}}}", "as": "q"}),
		plan(finalStep("early")),
		`{"plan":"machinespirit.plan/1","steps":[{"op":"final","answer":"x"}],"extra":{"a":1}}`,
		`{"plan":"machinespirit.plan/1","steps":[{"op":"slice","from":1e999,"bytes":1}]}`,
		`{"plan":"machinespirit.plan/1","steps":[{"op":"slice","from":-0,"bytes":99999999999999999999999999}]}`,
		`{"plan":"machinespirit.plan/1","steps":[{"op":"final","answer":"\u0000\ud800"}]}`,
		strings.Repeat("[", 8000) + strings.Repeat("]", 8000),
		"{" + strings.Repeat(`"k":1,`, 2000) + `"z":0}`,
		`{"plan":"machinespirit.plan/1","steps":[` + strings.Repeat(`{"op":"length"},`, 40) + `{"op":"length"}]}`,
		`shell("id"), final("x")`, "halt.", ":- initialization(halt).", "", "null", `"plan"`, "```json\n{}\n```",
	} {
		f.Add(s)
	}
	e := newExecutor(f, testConfig(f, nil))
	f.Fuzz(func(t *testing.T, reply string) {
		pid := e.workerPID()
		last := runReplies(t, e, "rlm", "a small context, aaaa", reply, plan(finalStep("done")))
		var out struct{ Answer string }
		if err := json.Unmarshal(last.Result, &out); err != nil {
			t.Fatalf("reply %q: result %s (%v)", reply, last.Result, err)
		}
		if out.Answer != "done" && !strings.Contains(reply, "final") {
			t.Fatalf("reply %q gave answer %q without a final step", reply, out.Answer)
		}
		if got := e.workerPID(); got != pid {
			t.Fatalf("reply %q: the worker changed from %d to %d", reply, pid, got)
		}
	})
}
