package main

import (
	"strings"
	"testing"

	"github.com/taskhost/taskhost/store"
)

// The token budget says when part of it is the host's estimate.
func TestMetersMarkEstimatedTokens(t *testing.T) {
	b := store.Budgets{ModelTokens: store.Budget{Used: 120, Limit: 1000}, OutputBytes: store.Budget{Used: 7, Limit: 64}}
	if got := meters(b); !strings.Contains(got, "tokens 120/1000  output 7/64B") {
		t.Errorf("meters = %q", got)
	}
	b.TokensEstimated = 2
	if got := meters(b); !strings.Contains(got, "tokens 120/1000 (estimated for 2 calls)") {
		t.Errorf("meters with estimated calls = %q", got)
	}
}
