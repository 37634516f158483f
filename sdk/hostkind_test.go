package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestHostErrorKind(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&HostError{Kind: ErrUnimplemented}, "unimplemented"},
		{fmt.Errorf("wrapped: %w", &HostError{Kind: ErrBudgetExhausted, Message: "tool_calls 2/2"}), "budget_exhausted"},
		{&HostError{Kind: ErrPermissionDenied}, "permission_denied"},
		{&HostError{Kind: ErrInvalidArgument}, "invalid_argument"},
		{&HostError{Kind: ErrHostUnavailable}, "host_unavailable"},
		{context.Canceled, ""},
		{errors.New("budget_exhausted"), ""}, // a message is not a kind
		{nil, ""},
	}
	for _, c := range cases {
		if got := HostErrorKind(c.err); got != c.want {
			t.Errorf("HostErrorKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
