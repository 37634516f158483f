package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The host's ErrorInfo reason, not the code, tells a model outage and an
// unsettled effect from a host that is gone.
func TestHostCallErrorReadsErrorInfo(t *testing.T) {
	withReason := func(c codes.Code, reason string) error {
		t.Helper()
		st, err := status.New(c, "refused").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "taskhost.dev"})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	cases := []struct {
		name string
		err  error
		want error
		kind string
	}{
		{"model unavailable", withReason(codes.Unavailable, ReasonModelUnavailable), ErrModelUnavailable, "model_unavailable"},
		{"effect unsettled", withReason(codes.FailedPrecondition, ReasonEffectUnsettled), ErrEffectUnsettled, "effect_unsettled"},
		{"unavailable, no detail", status.Error(codes.Unavailable, "gone"), ErrHostUnavailable, "host_unavailable"},
		{"unknown reason", withReason(codes.Unavailable, "SOMETHING_ELSE"), ErrHostUnavailable, "host_unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := hostCallError(context.Background(), "CallModel", tc.err)
			if !errors.Is(got, tc.want) || HostErrorKind(got) != tc.kind {
				t.Fatalf("hostCallError = %v (kind %q), want %v (%q)", got, HostErrorKind(got), tc.want, tc.kind)
			}
			if !errors.Is(tc.want, ErrHostUnavailable) && errors.Is(got, ErrHostUnavailable) {
				t.Fatalf("%v also matches ErrHostUnavailable", got)
			}
		})
	}
}

// A model failure becomes a *ModelError of the host's kind whose text is
// the provider's message once; only the transient kinds match
// ErrModelUnavailable, and none matches ErrHostUnavailable.
func TestHostCallErrorModelError(t *testing.T) {
	cases := []struct {
		code      codes.Code
		reason    string
		kind      string
		wantKind  ModelErrorKind
		transient bool
		hostKind  string
	}{
		{codes.Aborted, ReasonModelFailed, "auth", ModelKindAuth, false, "model_error"},
		{codes.Aborted, ReasonModelFailed, "bad_response", ModelKindBadResponse, false, "model_error"},
		{codes.Aborted, ReasonModelFailed, "request", ModelKindRequest, false, "model_error"},
		{codes.Unavailable, ReasonModelUnavailable, "rate_limited", ModelKindRateLimited, true, "model_unavailable"},
		{codes.Unavailable, ReasonModelUnavailable, "server", ModelKindServer, true, "model_unavailable"},
		{codes.Unavailable, ReasonModelUnavailable, "timeout", ModelKindTimeout, true, "model_unavailable"},
		{codes.Unavailable, ReasonModelUnavailable, "transport", ModelKindTransport, true, "model_unavailable"},
		{codes.Aborted, ReasonModelFailed, "bad_reply", ModelKindBadReply, false, "model_error"},
		{codes.Aborted, ReasonModelFailed, "context_exceeded", ModelKindContextExceeded, false, "model_error"},
		// A kind a newer host sends as an outage: still an outage.
		{codes.Unavailable, ReasonModelUnavailable, "brownout", ModelKindTimeout, true, "model_unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			st, err := status.New(tc.code, "HTTP 4xx: words").WithDetails(&errdetails.ErrorInfo{Reason: tc.reason, Domain: "taskhost.dev",
				Metadata: map[string]string{"kind": tc.kind}})
			if err != nil {
				t.Fatal(err)
			}
			got := hostCallError(context.Background(), "CallModel", st.Err())
			merr, ok := errors.AsType[*ModelError](fmt.Errorf("wrapped: %w", got))
			if !ok || merr.Kind != tc.wantKind {
				t.Fatalf("hostCallError = %#v, want a *ModelError of kind %s", got, tc.wantKind)
			}
			if want := "model " + string(tc.wantKind) + ": HTTP 4xx: words"; got.Error() != want {
				t.Errorf("Error() = %q, want %q", got.Error(), want)
			}
			if errors.Is(got, ErrModelUnavailable) != tc.transient || merr.Kind.Transient() != tc.transient {
				t.Errorf("transient = %v, want %v", errors.Is(got, ErrModelUnavailable), tc.transient)
			}
			if errors.Is(got, ErrHostUnavailable) {
				t.Errorf("%v matches ErrHostUnavailable", got)
			}
			if !errors.Is(got, &ModelError{Kind: tc.wantKind}) {
				t.Errorf("errors.Is(err, &ModelError{Kind: %s}) = false", tc.wantKind)
			}
			if k := HostErrorKind(got); k != tc.hostKind {
				t.Errorf("HostErrorKind = %q, want %q", k, tc.hostKind)
			}
		})
	}
}
