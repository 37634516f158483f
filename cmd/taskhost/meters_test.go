package main

import (
	"strings"
	"testing"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// The token budget says when part of it is the host's estimate.
func TestMetersMarkEstimatedTokens(t *testing.T) {
	b := &apipb.Budgets{ModelTokens: &apipb.Meter{Used: 120, Limit: 1000}, OutputBytes: &apipb.Meter{Used: 7, Limit: 64}}
	if got := meters(b); !strings.Contains(got, "tokens 120/1000  output 7/64B") {
		t.Errorf("meters = %q", got)
	}
	b.ModelTokensEstimatedCalls = 2
	if got := meters(b); !strings.Contains(got, "tokens 120/1000 (estimated for 2 calls)") {
		t.Errorf("meters with estimated calls = %q", got)
	}
}
