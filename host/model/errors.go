package model

import (
	"errors"
	"time"
)

// ErrorKind classifies a provider failure so the host can branch on it
// (fail the task, report a configuration problem, surface a cancel) without
// parsing text.
type ErrorKind int

// The kinds of [Error].
const (
	// KindAuth: the endpoint refused the credentials (HTTP 401 or 403).
	// Never retried: the same key fails the same way.
	KindAuth ErrorKind = iota + 1
	// KindRateLimited: HTTP 429, still after the configured retries.
	KindRateLimited
	// KindServer: HTTP 5xx, still after the configured retries.
	KindServer
	// KindBadResponse: the endpoint answered, but not in the protocol:
	// malformed JSON, no choices, a body over MaxResponseBodyBytes, a
	// redirect.
	KindBadResponse
	// KindCanceled: the caller's context was cancelled.
	KindCanceled
	// KindTimeout: no reply within the per-request timeout, or the caller's
	// context deadline passed.
	KindTimeout
	// KindScript: the scripted provider has no rule for the request, or a
	// script rule replied with an error of this kind.
	KindScript
	// KindRequest: the request itself was refused: by the provider before
	// sending (no messages, a tool schema that is not JSON) or by the
	// endpoint with a 4xx other than 401, 403 and 429. Not retried.
	KindRequest
	// KindTransport: no HTTP response at all (connection refused or reset,
	// DNS). Not retried: the protocol's POST is not idempotent and a
	// misconfigured base_url should surface at once.
	KindTransport
	// KindBadReply: the model's reply is not usable, though the server
	// is fine: the server could not parse it (llama.cpp's HTTP 500 "The
	// model produced output that does not match the expected ...
	// format"), or it is outside the bounds (too many tool calls, a tool
	// name or arguments too long). Not retried by the provider; an
	// executor may tell the model and ask again.
	KindBadReply
	// KindContextExceeded: the endpoint refused the request as longer
	// than the model's context (llama.cpp "exceeds the available context
	// size", OpenAI context_length_exceeded, vLLM "maximum context
	// length"). Not retried: the same request fails the same way; a
	// shorter one, or a server with a larger context, may not.
	KindContextExceeded
)

// String returns the kind's stable snake_case name (also the name a script's
// error reply uses).
func (k ErrorKind) String() string {
	switch k {
	case KindAuth:
		return "auth"
	case KindRateLimited:
		return "rate_limited"
	case KindServer:
		return "server"
	case KindBadResponse:
		return "bad_response"
	case KindCanceled:
		return "canceled"
	case KindTimeout:
		return "timeout"
	case KindScript:
		return "script"
	case KindRequest:
		return "request"
	case KindTransport:
		return "transport"
	case KindBadReply:
		return "bad_reply"
	case KindContextExceeded:
		return "context_exceeded"
	}
	return "unknown"
}

// lastKind is the highest defined kind; kindByName walks up to it.
const lastKind = KindContextExceeded

// kindByName is the inverse of String, for scripts.
func kindByName(name string) (ErrorKind, bool) {
	for k := KindAuth; k <= lastKind; k++ {
		if k.String() == name {
			return k, true
		}
	}
	return 0, false
}

// Error is every failure a provider returns from Complete. Message is bounded
// and never contains the API key.
//
//	var merr *model.Error
//	if errors.As(err, &merr) && merr.Kind == model.KindAuth { ... }
//	if errors.Is(err, &model.Error{Kind: model.KindAuth}) { ... } // same test
//	if errors.Is(err, context.Canceled) { ... } // KindCanceled unwraps to the context's error
type Error struct {
	Kind       ErrorKind
	Status     int           // the HTTP status, 0 when there was none
	Message    string        // what happened, for people; bounded
	RetryAfter time.Duration // the endpoint's last Retry-After (capped), 0 when none
	cause      error         // the context error or transport error, for errors.Is
}

func (e *Error) Error() string {
	return "model: " + e.Kind.String() + ": " + e.Message
}

// Unwrap returns the underlying context or transport error, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error of the same kind, so that
// errors.Is(err, &Error{Kind: k}) tests the kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

// Unavailable reports whether err is a model outage rather than a refusal:
// no answer at all (transport error, timeout) or 429/5xx still after the
// provider's retries. The same request may succeed later, so the host tells
// the executor apart from a host that is gone and from a request that will
// never work (auth, a bad request or reply).
func Unavailable(err error) bool {
	switch KindOf(err) {
	case KindRateLimited, KindServer, KindTimeout, KindTransport:
		return true
	}
	return false
}

// KindOf returns the kind of the *Error in err's chain, or 0 when there is
// none.
func KindOf(err error) ErrorKind {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return 0
}
