package sdk

import (
	"strings"
	"testing"
)

// TestToolResponseForModel: a result at the bound is kept whole, one byte
// past it is cut (never inside a rune) and marked; an error is prefixed.
func TestToolResponseForModel(t *testing.T) {
	const max = 10
	for _, tc := range []struct {
		name string
		in   ToolResponse
		want string
	}{
		{"at the bound", ToolResponse{Result: strings.Repeat("a", max)}, strings.Repeat("a", max)},
		{"one past", ToolResponse{Result: strings.Repeat("a", max+1)}, strings.Repeat("a", max) + "\n[output truncated]"},
		{"not inside a rune", ToolResponse{Result: strings.Repeat("a", max-1) + "é"}, strings.Repeat("a", max-1) + "\n[output truncated]"},
		{"an error", ToolResponse{Result: `"no file"`, IsError: true}, `error: "no file"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.in.ForModel(max); got != tc.want {
				t.Fatalf("ForModel = %q, want %q", got, tc.want)
			}
		})
	}
}
