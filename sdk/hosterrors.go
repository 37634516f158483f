package sdk

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostCallError turns the error of a host-services call into what an
// executor can act on: a *HostError matching one of the Err values, or the
// context's own error when the call was cancelled, so that
// errors.Is(err, context.Canceled) works the same with or without the host
// in between.
func hostCallError(ctx context.Context, method string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return &HostError{Kind: ErrHostUnavailable, Message: fmt.Sprintf("%s: %v", method, err)}
	}
	if merr := modelError(st); merr != nil {
		return merr
	}
	if kind := detailKind(st); kind != nil {
		return &HostError{Kind: kind, Message: fmt.Sprintf("%s: %s", method, st.Message())}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("sdk: %s: %w", method, ctxErr)
		}
		// The host ended the call on its side: the step is being cancelled
		// and ctx will follow.
		if st.Code() == codes.DeadlineExceeded {
			return fmt.Errorf("sdk: %s: %s: %w", method, st.Message(), context.DeadlineExceeded)
		}
		return fmt.Errorf("sdk: %s: %s: %w", method, st.Message(), context.Canceled)
	case codes.ResourceExhausted:
		// grpc-go reports a message over the size limit with the same code
		// the host uses for an exhausted budget. Telling the executor its
		// budget is gone would be a lie it might act on (stop the task), so
		// the size case is told apart by grpc's own wording.
		if strings.Contains(st.Message(), "larger than max") {
			return &HostError{Kind: ErrInvalidArgument, Message: fmt.Sprintf("%s: message exceeds the %d-byte limit: %s", method, maxMessageBytes, st.Message())}
		}
	}
	return &HostError{Kind: hostErrorKind(st.Code()), Message: fmt.Sprintf("%s: %s", method, st.Message())}
}

// modelError is the *ModelError the status's ErrorInfo describes, if any:
// the host names the provider's failure kind in the "kind" metadata and
// sends the provider's message alone as the status message, so the error
// reads "model <kind>: <message>" with no prefix repeated.
func modelError(st *status.Status) *ModelError {
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok {
			continue
		}
		switch info.GetReason() {
		case ReasonModelUnavailable, ReasonModelFailed:
			kind := modelErrorKind(info.GetMetadata()["kind"])
			if info.GetReason() == ReasonModelUnavailable && !kind.Transient() {
				// A kind this SDK does not know, sent as an outage: still
				// an outage.
				kind = ModelKindTimeout
			}
			return &ModelError{Kind: kind, Message: st.Message()}
		}
	}
	return nil
}

// detailKind is the Err value the status's ErrorInfo names, if any: the
// reasons the code alone cannot tell apart from a host that is gone.
func detailKind(st *status.Status) error {
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok {
			continue
		}
		switch info.GetReason() {
		case ReasonModelUnavailable:
			return ErrModelUnavailable
		case ReasonEffectUnsettled:
			return ErrEffectUnsettled
		}
	}
	return nil
}

// hostErrorKind maps a gRPC status code to one of the Err values. Codes the
// protocol does not assign to a refusal (Internal, Unknown, ...) mean the
// host could not serve the call: ErrHostUnavailable.
func hostErrorKind(c codes.Code) error {
	switch c {
	case codes.Unimplemented:
		return ErrUnimplemented
	case codes.PermissionDenied:
		return ErrPermissionDenied
	case codes.ResourceExhausted:
		return ErrBudgetExhausted
	case codes.InvalidArgument:
		return ErrInvalidArgument
	}
	return ErrHostUnavailable
}
