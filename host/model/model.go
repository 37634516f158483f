package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
	"unicode/utf8"

	"github.com/taskhost/taskhost/host/config"
)

// Bounds on what a provider hands back to the host. They hold for every
// provider, so the host, the effect ledger and the executors can rely on them
// whichever model is configured.
const (
	// MaxContentBytes bounds an assistant message's content. Longer content
	// is CUT at this size (on a UTF-8 boundary), not rejected: a long answer
	// is still an answer, and the legacy step summary is truncated further
	// anyway.
	MaxContentBytes = 64 << 10
	// MaxToolCalls is the most tool calls one assistant message may carry.
	// More is a BadResponse: dropping some silently would leave the model
	// waiting for results it never gets.
	MaxToolCalls = 16
	// MaxArgumentsBytes bounds one tool call's arguments (JSON text); more is
	// a BadResponse.
	MaxArgumentsBytes = 16 << 10
	// MaxToolNameBytes bounds a tool call's name; more (or an empty name) is
	// a BadResponse.
	MaxToolNameBytes = 64
	// MaxResponseBodyBytes caps how much of an HTTP response body is read;
	// a larger body is a BadResponse.
	MaxResponseBodyBytes = 1 << 20
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat message. An assistant message may carry tool calls; a
// tool message answers one of them and names it by ToolCallID.
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text, as the model wrote it; the tool layer validates it
}

// ToolSpec describes a tool offered to the model.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  string // JSON schema text; empty means "an object with no declared properties"
}

// Request is one model call. TaskID, Depth and Options are set by the host
// (never by the executor); the scripted provider can match on Depth.
type Request struct {
	Messages []Message
	Tools    []ToolSpec
	TaskID   string
	Depth    int
	// Options override the provider's configured ones where set (a task's
	// spec may ask for them).
	Options Options
	// Progress, when set, hears of a streamed reply as it arrives, at most
	// once a second. It must not block.
	Progress func(Progress)
}

// Options are what a request asks of the model besides its messages. A
// zero field means "the configured value".
type Options struct {
	MaxTokens   int // sent as max_tokens
	Temperature *float64
	TopP        *float64
	Seed        *int
	Stop        []string
}

// merge returns o with every field it leaves unset taken from def.
func (o Options) merge(def Options) Options {
	if o.MaxTokens == 0 {
		o.MaxTokens = def.MaxTokens
	}
	if o.Temperature == nil {
		o.Temperature = def.Temperature
	}
	if o.TopP == nil {
		o.TopP = def.TopP
	}
	if o.Seed == nil {
		o.Seed = def.Seed
	}
	if o.Stop == nil {
		o.Stop = def.Stop
	}
	return o
}

// Progress is how far a streamed reply has come.
type Progress struct {
	Chunks  int           // content and tool-call chunks so far, about a token each
	Elapsed time.Duration // since the request was sent
}

// Finish reasons a reply may carry (the protocol's finish_reason).
const (
	FinishStop      = "stop"
	FinishLength    = "length" // cut at max_tokens or at the end of the context
	FinishToolCalls = "tool_calls"
)

// Usage is what one model call cost, as the server reported it (tokens)
// and as the host measured it (duration).
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	Duration         time.Duration
	// Reported says the server reported the tokens (a usage object); when
	// it did not, the host estimates them for the task's token budget.
	Reported bool `json:",omitempty"`
}

// Add returns the sum of u's and v's counts (a sum is not Reported: it
// says nothing of each call).
func (u Usage) Add(v Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens + v.PromptTokens, CompletionTokens: u.CompletionTokens + v.CompletionTokens, Duration: u.Duration + v.Duration}
}

// Response is the model's reply: one assistant message with content and/or
// tool calls, within the bounds above, why the model stopped (one of the
// Finish constants, or the server's own word, or "" when it said nothing)
// and what the call cost.
type Response struct {
	Message      Message
	FinishReason string
	Usage        Usage
}

// Provider is a model behind the host. Implementations are safe for
// concurrent use: the host calls one provider from every running task.
type Provider interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// Preflighter is a Provider that can check cheaply, without a completion,
// that it can serve: the openai provider (GET /models). The error is an
// [*Error] like Complete's.
type Preflighter interface {
	Preflight(ctx context.Context) error
}

// Option adjusts a provider built by [New].
type Option func(*options)

type options struct {
	httpClient     *http.Client
	sleep          func(ctx context.Context, d time.Duration) error
	now            func() time.Time
	backoffBase    time.Duration
	attemptTimeout time.Duration // overrides cfg.TimeoutSeconds when > 0
	callTimeout    time.Duration // overrides cfg.MaxCallSeconds when > 0
}

// WithHTTPClient makes the openai provider send its requests through c (for
// example with a custom transport). The client's redirect policy is then the
// caller's: the default client refuses redirects so the API key is never
// sent anywhere but base_url.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.httpClient = c }
}

// withSleep replaces the backoff sleep, so tests record the waits instead of
// taking them.
func withSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) { o.sleep = f }
}

// withClock replaces the clock used to read an HTTP-date Retry-After.
func withClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// withBackoffBase replaces the first retry's backoff.
func withBackoffBase(d time.Duration) Option {
	return func(o *options) { o.backoffBase = d }
}

// withAttemptTimeout replaces cfg.TimeoutSeconds, whose one-second
// granularity is too coarse for a fast test.
func withAttemptTimeout(d time.Duration) Option {
	return func(o *options) { o.attemptTimeout = d }
}

// withCallTimeout replaces cfg.MaxCallSeconds.
func withCallTimeout(d time.Duration) Option {
	return func(o *options) { o.callTimeout = d }
}

// New builds the provider cfg names. getenv reads the API key variable (nil
// means os.Getenv); it is injectable so tests never touch the real
// environment. A scripted provider with an empty cfg.Script uses the embedded
// default script (see the package documentation).
func New(cfg config.Model, getenv func(string) string, opts ...Option) (Provider, error) {
	o := options{
		sleep:       sleepCtx,
		now:         time.Now,
		backoffBase: defaultBackoffBase,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	switch cfg.Provider {
	case config.ProviderScripted, "":
		if cfg.Script == "" {
			return newScripted(embeddedScriptName, []byte(defaultScript))
		}
		return loadScripted(cfg.Script)
	case config.ProviderOpenAI:
		return newOpenAI(cfg, getenv, o)
	default:
		return nil, fmt.Errorf("model: unknown provider %q: must be %q or %q", cfg.Provider, config.ProviderScripted, config.ProviderOpenAI)
	}
}

// sleepCtx waits d or until ctx ends, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkRequest refuses a request no provider can answer.
func checkRequest(req Request) error {
	if len(req.Messages) == 0 {
		return &Error{Kind: KindRequest, Message: "the request has no messages"}
	}
	return nil
}

// checkReply applies the bounds to an assistant message: content is cut,
// anything else out of bounds is an error message (empty when fine).
func checkReply(m *Message) string {
	m.Content = cutUTF8(m.Content, MaxContentBytes)
	if len(m.ToolCalls) > MaxToolCalls {
		return fmt.Sprintf("%d tool calls in one message; at most %d are accepted", len(m.ToolCalls), MaxToolCalls)
	}
	for i, tc := range m.ToolCalls {
		switch {
		case tc.Name == "":
			return fmt.Sprintf("tool call %d has no name", i+1)
		case len(tc.Name) > MaxToolNameBytes:
			return fmt.Sprintf("tool call %d: name %q is longer than %d bytes", i+1, cutUTF8(tc.Name, MaxToolNameBytes)+"…", MaxToolNameBytes)
		case len(tc.Arguments) > MaxArgumentsBytes:
			return fmt.Sprintf("tool call %d (%s): arguments are %d bytes; at most %d are accepted", i+1, tc.Name, len(tc.Arguments), MaxArgumentsBytes)
		}
	}
	return ""
}

// cutUTF8 returns s cut to at most n bytes without splitting a rune.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// excerpt is a short, single-line, bounded rendering of untrusted text for
// an error message.
func excerpt(s string, n int) string {
	cut := cutUTF8(s, n)
	b := make([]rune, 0, len(cut))
	for _, r := range cut {
		if r < 0x20 || r == 0x7f {
			r = ' '
		}
		b = append(b, r)
	}
	out := string(b)
	if len(cut) < len(s) {
		out += "…"
	}
	return out
}

// ctxError is the error for a request the caller's context ended: Timeout
// when its deadline passed, Canceled otherwise. It unwraps to err, so
// errors.Is(e, context.Canceled) holds too.
func ctxError(ctx context.Context, err error) *Error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Kind: KindTimeout, Message: "the caller's deadline passed", cause: context.DeadlineExceeded}
	}
	return &Error{Kind: KindCanceled, Message: "the request was cancelled", cause: context.Canceled}
}
