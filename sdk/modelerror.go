package sdk

// ModelErrorKind is why the host's model provider failed a CallModel, as a
// stable snake_case name an executor may branch on, log or hand to its own
// runtime.
type ModelErrorKind string

// The kinds of [ModelError]. RateLimited, Server and Timeout are transient:
// the provider already retried, but the same request may succeed later.
// Auth, BadResponse and Request are not: repeating the call fails the same
// way.
const (
	// ModelKindAuth: the endpoint refused the host's credentials (HTTP 401 or
	// 403). The host fails the task with reason "model_auth" if the step
	// fails on it.
	ModelKindAuth ModelErrorKind = "auth"
	// ModelKindRateLimited: HTTP 429, still after the host's retries.
	ModelKindRateLimited ModelErrorKind = "rate_limited"
	// ModelKindServer: HTTP 5xx, still after the host's retries.
	ModelKindServer ModelErrorKind = "server"
	// ModelKindTimeout: no reply in time, or no connection at all.
	ModelKindTimeout ModelErrorKind = "timeout"
	// ModelKindBadResponse: the endpoint answered, but not with a usable reply
	// (malformed, empty, over the host's bounds).
	ModelKindBadResponse ModelErrorKind = "bad_response"
	// ModelKindRequest: the endpoint (or the host's provider, before sending)
	// refused the request itself, e.g. HTTP 400 or a tool schema that is
	// not JSON.
	ModelKindRequest ModelErrorKind = "request"
)

// Transient reports whether a call that failed with kind k may succeed if
// made again later.
func (k ModelErrorKind) Transient() bool {
	switch k {
	case ModelKindRateLimited, ModelKindServer, ModelKindTimeout:
		return true
	}
	return false
}

// modelErrorKind is the kind named by the host's error detail; a name this
// SDK does not know (a newer host) is kept, and is not transient.
func modelErrorKind(name string) ModelErrorKind {
	if name == "" {
		return ModelKindBadResponse
	}
	return ModelErrorKind(name)
}

// ModelError is how a CallModel fails when the host is there but its model
// provider failed the call. Branch on it with errors.As:
//
//	var merr *sdk.ModelError
//	if errors.As(err, &merr) && merr.Kind.Transient() {
//		// retry later, or end the step: the host interrupts the task
//		// (model_unavailable) and it can be resumed.
//	}
//
// A transient ModelError also matches [ErrModelUnavailable] through
// errors.Is. Message is the provider's account of the failure, bounded, and
// never holds the API key.
type ModelError struct {
	Kind    ModelErrorKind
	Message string
}

func (e *ModelError) Error() string { return "model " + string(e.Kind) + ": " + e.Message }

// Is makes a transient error match ErrModelUnavailable, and an error of the
// same Kind match &ModelError{Kind: k}.
func (e *ModelError) Is(target error) bool {
	if target == ErrModelUnavailable {
		return e.Kind.Transient()
	}
	t, ok := target.(*ModelError)
	return ok && t.Kind == e.Kind && t.Message == ""
}
