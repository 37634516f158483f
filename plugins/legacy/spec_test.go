package legacy

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		want    spec
		wantErr []string // substrings of the error; nil: no error
	}{
		{"goal only", `{"goal":"g"}`, spec{Goal: "g", Legacy: options{MaxRounds: 8}}, nil},
		{"null legacy", `{"goal":"g","legacy":null}`, spec{Goal: "g", Legacy: options{MaxRounds: 8}}, nil},
		{"empty legacy", `{"goal":"g","legacy":{}}`, spec{Goal: "g", Legacy: options{MaxRounds: 8}}, nil},
		{"max_rounds", `{"goal":"g","legacy":{"max_rounds":4}}`, spec{Goal: "g", Legacy: options{MaxRounds: 4}}, nil},
		{"max_rounds 1", `{"goal":"g","legacy":{"max_rounds":1}}`, spec{Goal: "g", Legacy: options{MaxRounds: 1}}, nil},
		{"max_rounds 32", `{"goal":"g","legacy":{"max_rounds":32}}`, spec{Goal: "g", Legacy: options{MaxRounds: 32}}, nil},
		{"other executors' fields ignored", `{"goal":"g","testexec":{"steps":2}}`, spec{Goal: "g", Legacy: options{MaxRounds: 8}}, nil},
		{"unknown field", `{"goal":"g","legacy":{"max_round":4}}`, spec{}, []string{`unknown field "legacy.max_round"`, "legacy.max_rounds", "legacy.stop_after_identical_summaries"}},
		{"unknown fields, all named", `{"goal":"g","legacy":{"zeta":1,"alpha":2,"max_rounds":3}}`, spec{}, []string{`"legacy.alpha", "legacy.zeta"`}},
		{"max_rounds 0", `{"goal":"g","legacy":{"max_rounds":0}}`, spec{}, []string{"legacy.max_rounds", "1..32"}},
		{"max_rounds 33", `{"goal":"g","legacy":{"max_rounds":33}}`, spec{}, []string{"legacy.max_rounds", "1..32"}},
		{"max_rounds a string", `{"goal":"g","legacy":{"max_rounds":"8"}}`, spec{}, []string{"legacy.max_rounds", "integer"}},
		{"max_rounds a fraction", `{"goal":"g","legacy":{"max_rounds":2.5}}`, spec{}, []string{"legacy.max_rounds", "integer"}},
		{"legacy not an object", `{"goal":"g","legacy":[1]}`, spec{}, []string{"legacy: must be a JSON object"}},
		{"no goal", `{"legacy":{}}`, spec{}, []string{"goal"}},
		{"blank goal", `{"goal":"  "}`, spec{}, []string{"goal"}},
		{"goal not a string", `{"goal":7}`, spec{}, []string{"goal"}},
		{"not JSON", `goal: g`, spec{}, []string{"JSON"}},
		{"stop_after_identical_summaries 2", `{"goal":"g","legacy":{"stop_after_identical_summaries":2}}`, spec{Goal: "g", Legacy: options{MaxRounds: 8, StopAfterIdenticalSummaries: 2}}, nil},
		{"stop_after_identical_summaries 100", `{"goal":"g","legacy":{"stop_after_identical_summaries":100}}`, spec{Goal: "g", Legacy: options{MaxRounds: 8, StopAfterIdenticalSummaries: 100}}, nil},
		{"stop_after_identical_summaries 1", `{"goal":"g","legacy":{"stop_after_identical_summaries":1}}`, spec{}, []string{"legacy.stop_after_identical_summaries", "is 1", "0 (off) or 2..100"}},
		{"stop_after_identical_summaries 0 is off", `{"goal":"g","legacy":{"stop_after_identical_summaries":0}}`, spec{Goal: "g", Legacy: options{MaxRounds: 8}}, nil},
		{"stop_after_identical_summaries -1", `{"goal":"g","legacy":{"stop_after_identical_summaries":-1}}`, spec{}, []string{"legacy.stop_after_identical_summaries", "is -1"}},
		{"stop_after_identical_summaries 101", `{"goal":"g","legacy":{"stop_after_identical_summaries":101}}`, spec{}, []string{"legacy.stop_after_identical_summaries", "is 101", "0..100"}},
		{"stop_after_identical_summaries a string", `{"goal":"g","legacy":{"stop_after_identical_summaries":"3"}}`, spec{}, []string{"legacy.stop_after_identical_summaries", "integer"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSpec([]byte(tc.spec))
			if tc.wantErr == nil {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("parseSpec = %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseSpec = %+v, want an error", got)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestSpecWithAnUnknownFieldFailsTheStep(t *testing.T) {
	host := legacyHost(&sdktest.Host{})
	req := firstStep("goal")
	req.Spec = goalSpec("goal", `{"max_rounds":4,"temperature":0.2}`)
	res, err := New(nil).Step(context.Background(), host, req)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	wantOutcome(t, res, sdk.OutcomeFail, "executor_failed")
	if !strings.Contains(res.Message, `"legacy.temperature"`) {
		t.Errorf("message %q does not name the field", res.Message)
	}
	if calls, _, _, _ := snapshot(host); len(calls) != 0 {
		t.Errorf("host calls = %v, want none", calls)
	}
}
