package machinespirit

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	pad := func(n int) string { return strings.Repeat("x", n) }
	// inputOf builds an input object of exactly n bytes.
	inputOf := func(n int) string {
		const frame = `{"p":""}`
		return `{"p":"` + pad(n-len(frame)) + `"}`
	}
	tests := []struct {
		name    string
		spec    string
		wantErr string // "" = valid
	}{
		{"minimal", `{"goal":"g","machinespirit":{"graph":"rlm"}}`, ""},
		{"full", `{"goal":"g","machinespirit":{"graph":"plan_act_review","input":{"tasks":["a"]},"context_file":"dir/ctx.txt"}}`, ""},
		{"unknown top-level field", `{"goal":"g","machinespirit":{"graph":"rlm"},"extra":1}`, "extra: unknown field"},
		{"unknown nested field", `{"goal":"g","machinespirit":{"graph":"rlm","grpah":"x"}}`, "machinespirit.grpah: unknown field"},
		{"missing machinespirit", `{"goal":"g"}`, "machinespirit: missing"},
		{"machinespirit not an object", `{"goal":"g","machinespirit":[1]}`, "machinespirit: must be a JSON object"},
		{"missing graph", `{"goal":"g","machinespirit":{}}`, "machinespirit.graph: missing"},
		{"graph not a string", `{"goal":"g","machinespirit":{"graph":7}}`, "machinespirit.graph: must be a string"},
		{"graph id with capitals", `{"goal":"g","machinespirit":{"graph":"RLM"}}`, "machinespirit.graph:"},
		{"graph id at its limit", `{"goal":"g","machinespirit":{"graph":"` + "g" + pad(63) + `"}}`, ""},
		{"graph id one past its limit", `{"goal":"g","machinespirit":{"graph":"` + "g" + pad(64) + `"}}`, "machinespirit.graph:"},
		{"input not an object", `{"goal":"g","machinespirit":{"graph":"rlm","input":[1]}}`, "machinespirit.input: must be a JSON object"},
		{"input at its limit", `{"goal":"g","machinespirit":{"graph":"rlm","input":` + inputOf(maxInputBytes) + `}}`, ""},
		{"input one past its limit", `{"goal":"g","machinespirit":{"graph":"rlm","input":` + inputOf(maxInputBytes+1) + `}}`, "machinespirit.input: 65537 bytes"},
		{"goal at its limit", `{"goal":"` + pad(maxGoalChars) + `","machinespirit":{"graph":"rlm"}}`, ""},
		{"goal one past its limit", `{"goal":"` + pad(maxGoalChars+1) + `","machinespirit":{"graph":"rlm"}}`, "goal: 2001 characters"},
		{"goal counts characters, not bytes", `{"goal":"` + strings.Repeat("é", maxGoalChars) + `","machinespirit":{"graph":"rlm"}}`, ""},
		{"goal not a string", `{"goal":1,"machinespirit":{"graph":"rlm"}}`, "goal: must be a string"},
		{"context_file absolute", `{"machinespirit":{"graph":"rlm","context_file":"/etc/passwd"}}`, "machinespirit.context_file: must be relative"},
		{"context_file escapes", `{"machinespirit":{"graph":"rlm","context_file":"../x"}}`, "machinespirit.context_file: must be a clean path"},
		{"context_file unclean", `{"machinespirit":{"graph":"rlm","context_file":"a//b"}}`, "machinespirit.context_file: must be a clean path"},
		{"context_file empty", `{"machinespirit":{"graph":"rlm","context_file":""}}`, "machinespirit.context_file: must not be empty"},
		{"context_file at its limit", `{"machinespirit":{"graph":"rlm","context_file":"` + pad(maxContextFileBytes) + `"}}`, ""},
		{"context_file one past its limit", `{"machinespirit":{"graph":"rlm","context_file":"` + pad(maxContextFileBytes+1) + `"}}`, "machinespirit.context_file: 257 bytes"},
		{"not JSON", `{"goal":`, "spec: must be a JSON object"},
		{"trailing data", `{"machinespirit":{"graph":"rlm"}} {}`, "spec: trailing data"},
		{"spec one past its limit", `{"goal":"` + pad(maxSpecBytes) + `"}`, "spec: 131083 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sp, err := parseSpec([]byte(tc.spec))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("parseSpec: %v", err)
				}
				if !json.Valid(sp.Input) || sp.Input[0] != '{' {
					t.Fatalf("input %q is not an object", sp.Input)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("parseSpec error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
