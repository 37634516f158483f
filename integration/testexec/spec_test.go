package main

import (
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		want    options
		wantErr string
	}{
		{name: "goal only takes the defaults", spec: `{"goal":"g"}`, want: options{Steps: 1}},
		{name: "empty options", spec: `{"goal":"g","testexec":{}}`, want: options{Steps: 1}},
		{
			name: "every option",
			spec: `{"goal":"g","testexec":{"steps":3,"sleep_ms":10,"cancel_marker":"/m","pid_file":"/p","exit_at_attempt":1,
				"kill_at_attempt":2,"kill_after_ms":5,"panic_at_attempt":3,"ignore_ctx":true,"spawn_grandchild":true,
				"checkpoint_bytes":100,"result_bytes":200,"bad_schema":true,
				"progress":true,"call_model":true}}`,
			want: options{Steps: 3, SleepMS: 10, CancelMarker: "/m", PIDFile: "/p", ExitAtAttempt: 1, KillAtAttempt: 2,
				KillAfterMS: 5, PanicAtAttempt: 3, IgnoreCtx: true, SpawnGrandchild: true, CheckpointBytes: 100,
				ResultBytes: 200, BadSchema: true, Progress: true, CallModel: true},
		},
		{name: "bad JSON", spec: `{"goal":`, wantErr: "unexpected EOF"},
		{name: "not an object", spec: `[1]`, wantErr: "cannot unmarshal array"},
		{name: "unknown option", spec: `{"goal":"g","testexec":{"stepz":2}}`, wantErr: `unknown field "stepz"`},
		{name: "unknown top-level field", spec: `{"goal":"g","tstexec":{}}`, wantErr: `unknown field "tstexec"`},
		{name: "wrong type", spec: `{"testexec":{"steps":"two"}}`, wantErr: "testexec.steps"},
		{name: "trailing data", spec: `{"goal":"g"} {}`, wantErr: "trailing data"},
		{name: "negative", spec: `{"testexec":{"sleep_ms":-1}}`, wantErr: "testexec.sleep_ms: must not be negative"},
		{name: "parallel_model_calls at its bound", spec: `{"testexec":{"parallel_model_calls":32}}`,
			want: options{Steps: 1, ParallelModelCalls: 32}},
		{name: "parallel_model_calls past its bound", spec: `{"testexec":{"parallel_model_calls":33}}`,
			wantErr: "testexec.parallel_model_calls: at most 32 (the protocol's calls in flight per step), got 33"},
		{name: "parallel_model_calls negative", spec: `{"testexec":{"parallel_model_calls":-1}}`,
			wantErr: "testexec.parallel_model_calls: must not be negative"},
		{name: "kill_after_ms alone", spec: `{"testexec":{"kill_after_ms":10}}`, wantErr: "testexec.kill_after_ms: needs kill_at_attempt"},
		{name: "grandchild without pid file", spec: `{"testexec":{"spawn_grandchild":true}}`, wantErr: "testexec.spawn_grandchild: needs pid_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSpec([]byte(tt.spec))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseSpec error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseSpec: %v", err)
			}
			if got.Testexec != tt.want {
				t.Errorf("options = %+v\nwant %+v", got.Testexec, tt.want)
			}
		})
	}
}

func TestParseStartup(t *testing.T) {
	tests := []struct {
		args    []string
		want    string
		wantErr string
	}{
		{args: nil, want: ""},
		{args: []string{"-startup=noise"}, want: "noise"},
		{args: []string{"-startup", "hang"}, want: "hang"},
		{args: []string{"-startup=badcookie"}, want: "badcookie"},
		{args: []string{"-startup=sing"}, wantErr: "unknown mode sing"},
		{args: []string{"-verbose"}, wantErr: "not defined"},
		{args: []string{"extra"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		var stderr strings.Builder
		got, err := parseStartup(tt.args, &stderr)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseStartup(%q) error = %v, want one containing %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseStartup(%q) = (%q, %v), want %q", tt.args, got, err, tt.want)
		}
	}
}
