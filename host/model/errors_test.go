package model

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorKinds(t *testing.T) {
	for k := KindAuth; k <= lastKind; k++ {
		name := k.String()
		if name == "unknown" {
			t.Errorf("kind %d has no name", k)
		}
		if back, ok := kindByName(name); !ok || back != k {
			t.Errorf("kindByName(%q) = %v, %v; want %v", name, back, ok, k)
		}
	}
	if ErrorKind(0).String() != "unknown" || ErrorKind(99).String() != "unknown" {
		t.Error("undefined kinds must print as unknown")
	}
	if _, ok := kindByName("unknown"); ok {
		t.Error(`kindByName("unknown") succeeded`)
	}
}

func TestErrorMatching(t *testing.T) {
	base := &Error{Kind: KindCanceled, Message: "the request was cancelled", cause: context.Canceled}
	wrapped := fmt.Errorf("calling the model: %w", base)
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"Is same kind", errors.Is(wrapped, &Error{Kind: KindCanceled}), true},
		{"Is other kind", errors.Is(wrapped, &Error{Kind: KindAuth}), false},
		{"Is the cause", errors.Is(wrapped, context.Canceled), true},
		{"KindOf", KindOf(wrapped) == KindCanceled, true},
		{"KindOf a plain error", KindOf(errors.New("x")) == 0, true},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if got, want := base.Error(), "model: canceled: the request was cancelled"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// Only an outage — no answer, or 429/5xx after the retries — is
// Unavailable; a refusal that will fail the same way again is not.
func TestUnavailableKinds(t *testing.T) {
	for k := KindAuth; k <= lastKind; k++ {
		want := k == KindRateLimited || k == KindServer || k == KindTimeout || k == KindTransport
		if got := Unavailable(&Error{Kind: k}); got != want {
			t.Errorf("Unavailable(%s) = %v, want %v", k, got, want)
		}
	}
	if Unavailable(errors.New("not a model error")) || Unavailable(nil) {
		t.Error("an error that is not a *model.Error is not an outage")
	}
}
