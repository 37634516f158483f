package legacy

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

func TestCheckpointRoundTrip(t *testing.T) {
	for _, st := range []state{
		{LastSummaries: []string{"only"}, StepsDone: 1},
		{LastSummaries: []string{"a", "b"}, StepsDone: 12},
		{LastSummaries: []string{strings.Repeat("é", maxSummaryRunes), "b"}, StepsDone: 3},
	} {
		cp, err := st.checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		if cp.Schema != "legacy/1" {
			t.Fatalf("schema = %q", cp.Schema)
		}
		got, err := loadState(cp)
		if err != nil || !reflect.DeepEqual(got, st) {
			t.Fatalf("loadState = %+v, %v; want %+v", got, err, st)
		}
	}
}

func TestCheckpointCarriesTheNoProgressRun(t *testing.T) {
	host := &fakeHost{model: replies(text("a"), text("b"), text("c"))}
	req := firstStep("goal")
	var res sdk.StepResult
	for range 3 {
		res = mustStep(t, host, req)
		req = nextStep(req, res)
	}
	var payload map[string]any
	if err := json.Unmarshal(res.Checkpoint.Payload, &payload); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"last_summaries": []any{"b", "c"}, "steps_done": 3.0}
	if !reflect.DeepEqual(payload, want) {
		t.Fatalf("payload = %v, want %v (bounded to the summaries no_progress needs)", payload, want)
	}
}

func TestCheckpointIncompatibleFailsTheStep(t *testing.T) {
	tests := []struct {
		name    string
		cp      sdk.Checkpoint
		wantMsg string
	}{
		{"other executor's schema", sdk.Checkpoint{Schema: "testexec/1", Payload: []byte(`{"done":1}`)}, `schema "testexec/1"`},
		{"newer schema", sdk.Checkpoint{Schema: "legacy/2", Payload: []byte(`{"steps_done":1}`)}, `schema "legacy/2"`},
		{"not JSON", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`steps_done=1`)}, "payload"},
		{"unknown field", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"steps_done":1,"history":[]}`)}, "history"},
		{"trailing data", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"steps_done":1}{}`)}, "trailing"},
		{"negative steps", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"steps_done":-1}`)}, "steps_done"},
		{"too many summaries", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"last_summaries":["a","b","c","d"]}`)}, "last_summaries"},
		{"oversized summary", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"last_summaries":["` + strings.Repeat("x", maxSummaryRunes+1) + `"]}`)}, "last_summaries[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := &fakeHost{}
			req := firstStep("goal")
			req.Checkpoint = &tc.cp
			res, err := New(nil).Step(context.Background(), host, req)
			if err != nil {
				t.Fatalf("Step: %v", err)
			}
			wantOutcome(t, res, sdk.OutcomeFail, "checkpoint_incompatible")
			if !strings.Contains(res.Message, tc.wantMsg) {
				t.Errorf("message %q does not say %q", res.Message, tc.wantMsg)
			}
			if calls, _, _, _ := host.snapshot(); len(calls) != 0 {
				t.Errorf("host calls = %v, want none", calls)
			}
		})
	}
}
