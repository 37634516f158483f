package legacy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// zaraTable is testdata/zara_compat.json: Zara's runner as data. The
// integration package runs the same rows through the real binaries.
type zaraTable struct {
	Description string    `json:"description"`
	Rows        []zaraRow `json:"rows"`
}

type zaraRow struct {
	Name        string          `json:"name"`
	Note        string          `json:"note"`
	Goal        string          `json:"goal"`
	MaxSteps    int64           `json:"max_steps"`
	Legacy      json.RawMessage `json:"legacy"`
	Replies     []string        `json:"replies"`
	CrashInStep int             `json:"crash_in_step"`
	Want        struct {
		Status      string   `json:"status"`
		Reason      string   `json:"reason"`
		StepsUsed   int64    `json:"steps_used"`
		Summaries   []string `json:"summaries"`
		PromptSteps []int    `json:"prompt_steps"`
		Requests    []struct {
			Request int    `json:"request"`
			Context string `json:"context"`
			Prompt  string `json:"prompt"`
		} `json:"requests"`
	} `json:"want"`
}

// zaraTaskID is as long as the host's ids ("t_" and 26 base32 letters): the
// context's 2000-character cut depends on it.
const zaraTaskID = "t_zaracompatzaracompatzaraco"

// promptStep reads n of "step n/max" in a legacy prompt.
var promptStep = regexp.MustCompile(`^\[long-horizon task \S+ step (\d+)/\d+\] `)

func loadZaraTable(t *testing.T) []zaraRow {
	t.Helper()
	data, err := os.ReadFile("testdata/zara_compat.json")
	if err != nil {
		t.Fatal(err)
	}
	var tab zaraTable
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tab); err != nil {
		t.Fatalf("zara_compat.json: %v", err)
	}
	if len(tab.Rows) < 15 {
		t.Fatalf("zara_compat.json has %d rows, want at least 15", len(tab.Rows))
	}
	return tab.Rows
}

// zaraRun is what one row did: the host's view of the task's end, and every
// model request in order as (system, user) text.
type zaraRun struct {
	status, reason string
	stepsUsed      int64
	summaries      []string
	contexts       []string
	prompts        []string
	approvals      []string
}

// runZaraRow drives the executor as the host does: every attempt is
// charged a step, the request carries the host's last 5 summaries numbered
// by attempt, and a crashed attempt records nothing and leaves its model
// effect indeterminate for the next one.
func runZaraRow(t *testing.T, row zaraRow) zaraRun {
	t.Helper()
	spec := map[string]any{"goal": row.Goal}
	if len(row.Legacy) > 0 {
		spec["legacy"] = row.Legacy
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var (
		run           zaraRun
		recent        []sdk.Summary
		cp            *sdk.Checkpoint
		indeterminate []sdk.Effect
		crashed       bool
	)
	errCrash := errors.New("the plugin died")
	for attempt := int64(1); ; attempt++ {
		if run.stepsUsed >= row.MaxSteps {
			run.status, run.reason = "failed", "step_budget_exhausted"
			return run
		}
		run.stepsUsed++
		crash := false
		host := legacyHost(&sdktest.Host{CallModelF: func(_ context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
			n := stepOfRequest(t, req)
			if n == row.CrashInStep && !crashed {
				crashed, crash = true, true
				return sdk.ModelResponse{}, errCrash
			}
			if n < 1 || n > len(row.Replies) {
				t.Fatalf("the executor asked for step %d; the row scripts %d", n, len(row.Replies))
			}
			return sdk.ModelResponse{Message: text(row.Replies[n-1])}, nil
		}})
		req := sdk.StepRequest{
			TaskID: zaraTaskID, RunID: 1, Attempt: attempt, Spec: specJSON, Checkpoint: cp,
			Recent: recent, Indeterminate: indeterminate,
			Limits:    sdk.Budgets{Steps: row.MaxSteps, ToolCalls: 50, ModelCalls: 100},
			Remaining: sdk.Budgets{Steps: row.MaxSteps - run.stepsUsed, ToolCalls: 50, ModelCalls: 100},
		}
		res, err := New(nil).Step(context.Background(), host, req)
		_, models, _, approvals := snapshot(host)
		run.approvals = append(run.approvals, approvals...)
		for _, m := range models {
			if len(m.Messages) != 2 || m.Messages[0].Role != "system" || m.Messages[1].Role != "user" {
				t.Fatalf("request %d: messages %+v, want a system and a user message", len(run.prompts)+1, m.Messages)
			}
			run.contexts = append(run.contexts, m.Messages[0].Content)
			run.prompts = append(run.prompts, m.Messages[1].Content)
		}
		if crash {
			// The attempt's outcome is never seen: the host records nothing
			// but the model effect that was in flight.
			indeterminate = []sdk.Effect{{Attempt: attempt, Seq: 1, Kind: "model", Status: "dispatching"}}
			continue
		}
		indeterminate = nil
		if err != nil {
			t.Fatalf("attempt %d: Step: %v", attempt, err)
		}
		switch res.Outcome {
		case sdk.OutcomeContinue, sdk.OutcomeComplete:
			run.summaries = append(run.summaries, res.Summary)
			recent = append(recent, sdk.Summary{Step: attempt, Text: res.Summary})
			if len(recent) > 5 {
				recent = recent[len(recent)-5:]
			}
			cp = res.Checkpoint
			if res.Outcome == sdk.OutcomeComplete {
				run.status = "completed"
				return run
			}
		case sdk.OutcomeFail:
			run.status, run.reason = "failed", res.Reason
			return run
		default:
			t.Fatalf("attempt %d: outcome %v", attempt, res.Outcome)
		}
	}
}

func stepOfRequest(t *testing.T, req sdk.ModelRequest) int {
	t.Helper()
	if len(req.Messages) < 2 {
		t.Fatalf("model request with %d messages", len(req.Messages))
	}
	m := promptStep.FindStringSubmatch(req.Messages[1].Content)
	if m == nil {
		t.Fatalf("no step number in the prompt %q", req.Messages[1].Content)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestZaraCompatTable runs every row of testdata/zara_compat.json against
// the executor, through a host emulation that charges, numbers and crashes
// attempts as taskhost does.
func TestZaraCompatTable(t *testing.T) {
	for _, row := range loadZaraTable(t) {
		t.Run(row.Name, func(t *testing.T) {
			got := runZaraRow(t, row)
			checkZaraRow(t, row, zaraTaskID, got)
			if len(got.approvals) != 0 {
				t.Errorf("approvals asked: %q (an interrupted model call needs none)", got.approvals)
			}
		})
	}
}

// checkZaraRow compares a run with its row. It is the one comparison the
// in-process table and (in its own copy) the real-binary table make.
func checkZaraRow(t *testing.T, row zaraRow, taskID string, got zaraRun) {
	t.Helper()
	w := row.Want
	if got.status != w.Status || got.reason != w.Reason || got.stepsUsed != w.StepsUsed {
		t.Errorf("ended %s (%s) after %d steps, want %s (%s) after %d", got.status, got.reason, got.stepsUsed, w.Status, w.Reason, w.StepsUsed)
	}
	if !reflect.DeepEqual(got.summaries, w.Summaries) && !(len(got.summaries) == 0 && len(w.Summaries) == 0) {
		t.Errorf("summaries\n got %q\nwant %q", got.summaries, w.Summaries)
	}
	var steps []int
	for _, p := range got.prompts {
		m := promptStep.FindStringSubmatch(p)
		if m == nil {
			t.Fatalf("no step number in the prompt %q", p)
		}
		n, _ := strconv.Atoi(m[1])
		steps = append(steps, n)
	}
	if !reflect.DeepEqual(steps, w.PromptSteps) {
		t.Errorf("prompts asked for steps %v, want %v", steps, w.PromptSteps)
	}
	for _, r := range w.Requests {
		if r.Request < 1 || r.Request > len(got.prompts) {
			t.Errorf("request %d was never sent (%d were)", r.Request, len(got.prompts))
			continue
		}
		wantCtx := strings.ReplaceAll(r.Context, "{task}", taskID)
		wantPrompt := strings.ReplaceAll(r.Prompt, "{task}", taskID)
		if c := got.contexts[r.Request-1]; c != wantCtx {
			t.Errorf("request %d: context\n got %q\nwant %q", r.Request, c, wantCtx)
		}
		if p := got.prompts[r.Request-1]; p != wantPrompt {
			t.Errorf("request %d: prompt\n got %q\nwant %q", r.Request, p, wantPrompt)
		}
	}
}
