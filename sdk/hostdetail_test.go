package sdk

import (
	"context"
	"errors"
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
