package host

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/plugin"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
	"github.com/taskhost/taskhost/store"
)

// progressFails is a Services whose Progress answers err.
type progressFails struct {
	plugin.NoServices
	err error
}

func (p progressFails) Progress(context.Context, string, string) error { return p.err }

// TestEffectErrorReachesTheExecutor pins what a ledger refusal becomes for
// the executor: effectError turns the store's errors into the seam's typed
// errors (host/plugin imports no store), and the adapter's code follows. A
// store outage is Unavailable and marks the step's ledger incomplete; an
// exhausted budget is ResourceExhausted and fails the task with its reason.
func TestEffectErrorReachesTheExecutor(t *testing.T) {
	t.Parallel()
	outage := fmt.Errorf("insert effect: %w", store.ErrUnavailable)
	tests := []struct {
		name        string
		err         error
		is          error
		code        codes.Code
		storeFailed bool
		exhausted   store.Reason
	}{
		{"store outage", outage, plugin.ErrNotRecorded, codes.Unavailable, true, ""},
		{"budget", &store.BudgetError{Budget: store.BudgetToolCalls, Limit: 5, Used: 5}, plugin.ErrBudgetExhausted, codes.ResourceExhausted, false, store.ReasonToolBudgetExhausted},
		{"attempt superseded", fmt.Errorf("mark: %w", store.ErrConflict), plugin.ErrStepEnded, codes.FailedPrecondition, false, ""},
		{"task gone", store.ErrNotFound, plugin.ErrStepEnded, codes.FailedPrecondition, false, ""},
		{"cancelled", context.Canceled, context.Canceled, codes.Canceled, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := &turnState{}
			err := effectError(ts, tt.err)
			if !errors.Is(err, tt.is) {
				t.Fatalf("effectError = %v, want one matching %v", err, tt.is)
			}
			if got := ts.storeError() != nil; got != tt.storeFailed {
				t.Errorf("store failure noted = %v, want %v", got, tt.storeFailed)
			}
			if got, _ := ts.exhaustedReason(); got != tt.exhausted {
				t.Errorf("exhausted = %q, want %q", got, tt.exhausted)
			}
			var be *plugin.BudgetError
			if errors.As(err, &be) && be.Reason != string(tt.exhausted) {
				t.Errorf("BudgetError.Reason = %q, want %q", be.Reason, tt.exhausted)
			}
			_, werr := plugin.NewServicesServer(progressFails{err: err}).Progress(context.Background(), &pb.ProgressRequest{})
			if c := status.Code(werr); c != tt.code {
				t.Errorf("executor receives %v (%v), want %v", c, werr, tt.code)
			}
		})
	}
}
