package legacy

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

func TestCheckpointRoundTrip(t *testing.T) {
	for _, st := range []state{
		{LastSummaries: []string{"only"}, StepsDone: 1, Repeats: 1},
		{LastSummaries: []string{"b"}, StepsDone: 12, Repeats: 3},
		{LastSummaries: []string{strings.Repeat("é", maxSummaryRunes)}, StepsDone: 3, Repeats: 1},
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

// Executors before 1.1.0 wrote the last two summaries and no repeats.
func TestCheckpointOfAnEarlierVersionLoads(t *testing.T) {
	tests := []struct {
		payload string
		want    state
	}{
		{`{"last_summaries":[],"steps_done":0}`, state{LastSummaries: []string{}}},
		{`{"last_summaries":["a"],"steps_done":1}`, state{LastSummaries: []string{"a"}, StepsDone: 1, Repeats: 1}},
		{`{"last_summaries":["a","b"],"steps_done":7}`, state{LastSummaries: []string{"a", "b"}, StepsDone: 7, Repeats: 1}},
		{`{"last_summaries":["b","b"],"steps_done":7}`, state{LastSummaries: []string{"b", "b"}, StepsDone: 7, Repeats: 2}},
	}
	for _, tc := range tests {
		got, err := loadState(&sdk.Checkpoint{Schema: CheckpointSchema, Payload: []byte(tc.payload)})
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("loadState(%s) = %+v, %v; want %+v", tc.payload, got, err, tc.want)
		}
		if r := got.repeats("b"); tc.want.Repeats == 2 && r != 3 {
			t.Errorf("loadState(%s).repeats(b) = %d, want 3", tc.payload, r)
		}
	}
}

func TestCheckpointCarriesTheNoProgressRun(t *testing.T) {
	host := legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text("a"), text("b"), text("b"))})
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
	want := map[string]any{"last_summaries": []any{"b"}, "steps_done": 3.0, "repeats": 2.0}
	if !reflect.DeepEqual(payload, want) {
		t.Fatalf("payload = %v, want %v (one summary and its run, however long the run)", payload, want)
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
		{"negative repeats", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"steps_done":1,"repeats":-1}`)}, "repeats"},
		{"more repeats than steps", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"last_summaries":["a"],"steps_done":1,"repeats":2}`)}, "repeats"},
		{"too many summaries", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"last_summaries":["a","b","c","d"]}`)}, "last_summaries"},
		{"oversized summary", sdk.Checkpoint{Schema: "legacy/1", Payload: []byte(`{"last_summaries":["` + strings.Repeat("x", maxSummaryRunes+1) + `"]}`)}, "last_summaries[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := legacyHost(&sdktest.Host{})
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
			if calls, _, _, _ := snapshot(host); len(calls) != 0 {
				t.Errorf("host calls = %v, want none", calls)
			}
		})
	}
}
