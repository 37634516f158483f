package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/tools"
)

// TestServiceStatus pins the one mapping of host-service errors to what an
// executor receives: the code and ErrorInfo the SDK branches on, however
// deep the error is wrapped.
func TestServiceStatus(t *testing.T) {
	t.Parallel()
	unsettled := &UnsettledEffectError{Effect: Effect{Kind: "tool", Attempt: 2, Seq: 3, Status: "indeterminate", Summary: "shell.run"}}
	budget := &BudgetError{Reason: "tool_budget_exhausted", Err: errors.New("tool_calls: 50 of 50 used")}
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		reason   string
		metadata map[string]string
	}{
		{"unsettled effect", unsettled, codes.FailedPrecondition, sdkReasonEffectUnsettled,
			map[string]string{"kind": "tool", "attempt": "2", "seq": "3", "status": "indeterminate"}},
		{"unsettled effect, wrapped", fmt.Errorf("gate: %w", unsettled), codes.FailedPrecondition, sdkReasonEffectUnsettled, nil},
		{"model outage", &ModelError{Kind: "rate_limited", Unavailable: true, Message: "slow down"}, codes.Unavailable, sdkReasonModelUnavailable,
			map[string]string{"kind": "rate_limited"}},
		{"model failure", &ModelError{Kind: "auth", Message: "bad key"}, codes.Aborted, sdkReasonModelFailed, map[string]string{"kind": "auth"}},
		{"budget", budget, codes.ResourceExhausted, "", nil},
		{"turn token", Refuse(ErrNotAllowed, "turn token is not valid"), codes.PermissionDenied, "", nil},
		{"no model", Refuse(ErrNotConfigured, "no model provider is configured"), codes.Unimplemented, "", nil},
		{"unknown tool", Refuse(ErrUnknownTool, "tool %q is unknown or disabled", "x"), codes.NotFound, "", nil},
		{"step ended", fmt.Errorf("%w: %w", ErrStepEnded, errors.New("task t_1 not found")), codes.FailedPrecondition, "", nil},
		// A tool whose own failure is a cancel is still a tool failure.
		{"tool failed", &ToolError{Err: context.Canceled}, codes.Aborted, "", nil},
		{"approval refused", &ApprovalRefusedError{ID: "a_1", Status: "rejected"}, codes.Aborted, "", nil},
		{"field", &FieldError{Field: "question", Message: "empty"}, codes.InvalidArgument, "", nil},
		{"tool arguments", fmt.Errorf("call: %w", &tools.ArgError{}), codes.InvalidArgument, "", nil},
		{"cancelled", context.Canceled, codes.Canceled, "", nil},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "", nil},
		{"not recorded", fmt.Errorf("progress %w: %w", ErrNotRecorded, errors.New("disk full")), codes.Unavailable, "", nil},
		{"unknown", errors.New("boom"), codes.Internal, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(serviceStatus(tt.err))
			if st.Code() != tt.code {
				t.Fatalf("code = %v, want %v (%v)", st.Code(), tt.code, st.Message())
			}
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			if got := info.GetReason(); got != tt.reason {
				t.Fatalf("reason = %q, want %q", got, tt.reason)
			}
			if info != nil && info.GetDomain() != errorDomain {
				t.Errorf("domain = %q, want %q", info.GetDomain(), errorDomain)
			}
			for k, v := range tt.metadata {
				if got := info.GetMetadata()[k]; got != v {
					t.Errorf("metadata[%q] = %q, want %q", k, got, v)
				}
			}
		})
	}
	if err := serviceStatus(nil); err != nil {
		t.Fatalf("serviceStatus(nil) = %v, want nil", err)
	}
}

// TestModelErrorMessage: the executor reads the provider's words alone.
func TestModelErrorMessage(t *testing.T) {
	t.Parallel()
	st := status.Convert(serviceStatus(&ModelError{Kind: "server", Unavailable: true, Message: "502 from upstream"}))
	if st.Message() != "502 from upstream" {
		t.Fatalf("message = %q, want the provider's words alone", st.Message())
	}
	if !errors.Is(&ModelError{Unavailable: true}, ErrModelUnavailable) || errors.Is(&ModelError{}, ErrModelUnavailable) ||
		!errors.Is(&ModelError{}, ErrModelFailed) {
		t.Fatal("ModelError matches the wrong sentinel")
	}
}
