package sdk

// ModelErrorKind is why the host's model provider failed a CallModel, as a
// stable snake_case name an executor may branch on, log or hand to its own
// runtime.
type ModelErrorKind string

// The kinds of [ModelError]. RateLimited, Server, Timeout and Transport
// are transient: the provider already retried, but the same request may
// succeed later. Auth, BadResponse, Request and ContextExceeded are not:
// repeating the call fails the same way. BadReply is the model's doing: the
// same request may get a usable reply, and telling the model what was wrong
// may help.
const (
	// ModelKindAuth: the endpoint refused the host's credentials (HTTP 401 or
	// 403). The host fails the task with reason "model_auth" if the step
	// fails on it.
	ModelKindAuth ModelErrorKind = "auth"
	// ModelKindRateLimited: HTTP 429, still after the host's retries.
	ModelKindRateLimited ModelErrorKind = "rate_limited"
	// ModelKindServer: HTTP 5xx, still after the host's retries.
	ModelKindServer ModelErrorKind = "server"
	// ModelKindTimeout: no reply in time (the host's model.timeout_seconds
	// between chunks, or model.max_call_seconds in all).
	ModelKindTimeout ModelErrorKind = "timeout"
	// ModelKindTransport: no HTTP answer at all, or the connection broke
	// mid-reply (connection refused or reset, a server killed while it
	// generated). A host older than this kind says timeout instead.
	ModelKindTransport ModelErrorKind = "transport"
	// ModelKindBadReply: the model's reply could not be used (the server
	// could not parse it as a tool call, or it is over the host's bounds:
	// too many tool calls, arguments too long). The server is fine.
	ModelKindBadReply ModelErrorKind = "bad_reply"
	// ModelKindContextExceeded: the endpoint refused the request as longer
	// than the model's context. A shorter request may pass; the host's
	// StepRequest.ModelPromptTokens says how long one may be, when known.
	ModelKindContextExceeded ModelErrorKind = "context_exceeded"
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
	case ModelKindRateLimited, ModelKindServer, ModelKindTimeout, ModelKindTransport:
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
