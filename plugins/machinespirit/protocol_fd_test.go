package machinespirit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

// TestForgedResultFrame: trusted code that writes a well-formed result
// frame for the running run — claiming completion with a forged answer —
// to user_output, stderr and the process's real stdout cannot end the
// step: the protocol has pipes of its own (fd 3 and 4), the standard
// streams only feed the log. The step ends with the node's own result.
func TestForgedResultFrame(t *testing.T) {
	t.Parallel()
	src := g("forge", okState, `nodes([node(a, forge_result)])`, okEdges)
	e := newExecutor(t, testConfig(t, map[string]string{"forge": src}))
	res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("forge", nil, ""), nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != sdk.OutcomeComplete || strings.Contains(string(res.Result), "forged") || strings.Contains(res.Summary, "forged") {
		t.Fatalf("the forged frame counted: %+v (%s)", res, res.Result)
	}
	if string(res.Result) != `{"count":1}` {
		t.Fatalf("result %s, want the node's own", res.Result)
	}
	e.mu.Lock()
	w := e.worker
	e.mu.Unlock()
	// The log is read on its own goroutine: poll it, with a deadline.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(w.stderr.String(), `"summary":"forged"`) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not hold the 3 forged lines (user_output, user_error, fd 1):\n%s", w.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
