package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskhost/taskhost/host/config"
)

const (
	defaultTimeout     = 60 * time.Second
	defaultCallTimeout = 600 * time.Second
	// progressEvery is the least time between two progress reports of one
	// streamed call.
	progressEvery = time.Second
	// maxStreamBytes bounds all the bytes of one streamed reply (each of
	// its events is bounded by MaxResponseBodyBytes): a reply at
	// MaxContentBytes, a token an event, is about 200 bytes a token.
	maxStreamBytes     = 32 << 20
	defaultBackoffBase = 500 * time.Millisecond
	// maxBackoff caps the computed backoff; maxRetryAfter caps a server's
	// Retry-After, so a hostile or confused endpoint cannot park a task for
	// hours inside one model call.
	maxBackoff    = 30 * time.Second
	maxRetryAfter = 60 * time.Second
	// maxErrorExcerpt bounds how much of an error body is quoted.
	maxErrorExcerpt = 300
	// maxRetriesCap mirrors config's range for model.max_retries.
	maxRetriesCap = 10
)

// The causes of an attempt's context when the provider, not the caller,
// ended it.
var (
	errIdleTimeout = errors.New("model request idle timeout")
	errCallTimeout = errors.New("model request call timeout")
)

// openAI speaks the OpenAI-compatible chat-completions protocol. Its fields
// are set once by newOpenAI; it is safe for concurrent use.
type openAI struct {
	endpoint    string
	model       string
	apiKey      string // sent only as the Authorization header; never in an error
	client      *http.Client
	timeout     time.Duration // the longest wait for the server: the reply, or a stream's next chunk
	callTimeout time.Duration // one attempt as a whole
	maxRetries  int
	backoffBase time.Duration
	sleep       func(ctx context.Context, d time.Duration) error
	now         func() time.Time
	stream      bool
	defaults    Options
	extraBody   map[string]json.RawMessage
}

func newOpenAI(cfg config.Model, getenv func(string) string, o options) (*openAI, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("model: openai: base_url %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.Name == "" {
		return nil, errors.New("model: openai: no model name (model.model)")
	}
	if cfg.APIKey != "" {
		// Never echo it: it may be a real key pasted into the config.
		return nil, errors.New("model: openai: a literal api_key is refused; name an environment variable in api_key_env instead")
	}
	var key string
	if cfg.APIKeyEnv != "" {
		key = getenv(cfg.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("model: openai: the environment variable %s (model.api_key_env) is empty or unset", cfg.APIKeyEnv)
		}
	}
	timeout := time.Duration(cfg.TimeoutSeconds) * time.Second
	switch {
	case o.attemptTimeout > 0:
		timeout = o.attemptTimeout
	case cfg.TimeoutSeconds == 0:
		timeout = defaultTimeout
	case cfg.TimeoutSeconds < 0:
		return nil, fmt.Errorf("model: openai: timeout_seconds = %d: must be positive", cfg.TimeoutSeconds)
	}
	if cfg.MaxRetries < 0 || cfg.MaxRetries > maxRetriesCap {
		return nil, fmt.Errorf("model: openai: max_retries = %d: must be 0..%d", cfg.MaxRetries, maxRetriesCap)
	}
	client := o.httpClient
	if client == nil {
		client = &http.Client{
			// A redirect would re-send the key to wherever it points; an
			// API endpoint has no reason to redirect a POST.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	var extra map[string]json.RawMessage
	if msg := config.CheckExtraBody(cfg.ExtraBody); msg != "" {
		return nil, fmt.Errorf("model: openai: extra_body %s", msg)
	} else if cfg.ExtraBody != "" {
		_ = json.Unmarshal([]byte(cfg.ExtraBody), &extra) // checked just above
	}
	callTimeout := time.Duration(cfg.MaxCallSeconds) * time.Second
	if callTimeout <= 0 {
		callTimeout = defaultCallTimeout
	}
	if o.callTimeout > 0 {
		callTimeout = o.callTimeout
	}
	return &openAI{
		endpoint:    strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		model:       cfg.Name,
		apiKey:      key,
		client:      client,
		timeout:     timeout,
		callTimeout: callTimeout,
		maxRetries:  cfg.MaxRetries,
		backoffBase: o.backoffBase,
		sleep:       o.sleep,
		now:         o.now,
		stream:      cfg.Stream,
		defaults:    Options{MaxTokens: cfg.MaxTokens, Temperature: cfg.Temperature, TopP: cfg.TopP, Seed: cfg.Seed, Stop: cfg.Stop},
		extraBody:   extra,
	}, nil
}

// Complete sends the request, retrying 429 and 5xx answers up to maxRetries
// times with exponential backoff and jitter, or the server's Retry-After.
func (p *openAI) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, ctxError(ctx, err)
	}
	if err := checkRequest(req); err != nil {
		return Response{}, err
	}
	names, err := requestToolNames(req)
	if err != nil {
		return Response{}, err
	}
	body, err := p.encode(req, names)
	if err != nil {
		return Response{}, err
	}
	priorCalls := 0
	for _, m := range req.Messages {
		priorCalls += len(m.ToolCalls)
	}
	for retry := 0; ; retry++ {
		began := time.Now()
		resp, ferr := p.attempt(ctx, body, priorCalls, names, req.Progress)
		if ferr == nil {
			resp.Usage.Duration = time.Since(began)
			return resp, nil
		}
		if (ferr.Kind != KindRateLimited && ferr.Kind != KindServer) || retry >= p.maxRetries {
			if retry > 0 {
				ferr.Message += fmt.Sprintf(" (after %d attempts)", retry+1)
			}
			return Response{}, ferr
		}
		wait := ferr.RetryAfter
		if wait <= 0 {
			wait = p.backoff(retry)
		}
		if err := p.sleep(ctx, wait); err != nil {
			return Response{}, ctxError(ctx, err)
		}
	}
}

// backoff is the wait before retry number retry+1: base·2^retry, capped,
// with "equal jitter" (a uniform draw from its upper half), so that tasks
// rate-limited together do not retry in lockstep yet never retry at once.
func (p *openAI) backoff(retry int) time.Duration {
	d := maxBackoff
	if retry < 30 {
		if b := p.backoffBase << retry; b > 0 && b < maxBackoff {
			d = b
		}
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// attemptContext bounds one attempt: the call as a whole (callTimeout) and
// each wait for the server (timeout; touch restarts it on every byte read).
// Ending ctx, or calling stop, aborts the request: the server sees its
// connection close, which is what stops a generation on llama.cpp.
func (p *openAI) attemptContext(ctx context.Context) (actx context.Context, touch func(), stop func()) {
	cctx, cancelCall := context.WithTimeoutCause(ctx, p.callTimeout, errCallTimeout)
	actx, cancel := context.WithCancelCause(cctx)
	idle := time.AfterFunc(p.timeout, func() { cancel(errIdleTimeout) })
	return actx, func() { idle.Reset(p.timeout) }, func() {
		idle.Stop()
		cancel(nil)
		cancelCall()
	}
}

// touchReader restarts the idle timer whenever bytes arrive.
type touchReader struct {
	r     io.Reader
	touch func()
}

func (t touchReader) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	if n > 0 {
		t.touch()
	}
	return n, err
}

// attempt is one HTTP round trip under the attempt's bounds.
func (p *openAI) attempt(ctx context.Context, body []byte, priorCalls int, names toolNames, progress func(Progress)) (Response, *Error) {
	actx, touch, stop := p.attemptContext(ctx)
	defer stop()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return Response{}, p.fail(KindRequest, 0, err, "building the request: %v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if p.stream {
		hreq.Header.Set("Accept", "text/event-stream, application/json")
	}
	if p.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.apiKey)
	}
	sent := p.now()
	hresp, err := p.client.Do(hreq)
	if err != nil {
		return Response{}, p.roundTripError(ctx, actx, err, "sending the request")
	}
	defer hresp.Body.Close()
	touch()
	status := hresp.StatusCode
	rd := touchReader{hresp.Body, touch}
	if status >= 200 && status <= 299 && isEventStream(hresp.Header) {
		return p.readStream(ctx, actx, rd, status, priorCalls, names, progress, sent)
	}
	data, err := io.ReadAll(io.LimitReader(rd, MaxResponseBodyBytes+1))
	if err != nil {
		return Response{}, p.roundTripError(ctx, actx, err, "reading the response")
	}
	oversized := len(data) > MaxResponseBodyBytes
	if oversized {
		data = data[:MaxResponseBodyBytes]
	}
	if status >= 200 && status <= 299 {
		if oversized {
			return Response{}, p.fail(KindBadResponse, status, nil, "the response body exceeds %d bytes", MaxResponseBodyBytes)
		}
		return p.decode(data, status, priorCalls, names)
	}
	return Response{}, p.statusError(status, hresp.Header, data)
}

func isEventStream(h http.Header) bool {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// Texts by which servers say what went wrong, where the status alone does
// not: a context-length refusal (a 400 like any bad request) and a reply the
// server could not parse (a 500 like any server fault).
var (
	// llama.cpp: "request (1103 tokens) exceeds the available context size
	// (1024 tokens), try increasing it" (type exceed_context_size_error);
	// OpenAI: code context_length_exceeded, "This model's maximum context
	// length is ..."; vLLM: "This model's maximum context length is 4096
	// tokens. However, you requested ..."; Ollama cuts the prompt instead.
	contextExceededTexts = []string{"exceed_context_size_error", "context_length_exceeded", "exceeds the available context size",
		"is larger than the max context size", "maximum context length", "context window"}
	// llama.cpp: "The model produced output that does not match the
	// expected <format> format" (HTTP 500); older builds: "Failed to parse
	// input at pos N".
	badReplyTexts = []string{"does not match the expected", "failed to parse input", "failed to parse tool call"}
)

// statusError classifies a response that is not a 2xx.
func (p *openAI) statusError(status int, h http.Header, data []byte) *Error {
	lower := strings.ToLower(string(data))
	has := func(texts []string) bool {
		return slices.ContainsFunc(texts, func(t string) bool { return strings.Contains(lower, strings.ToLower(t)) })
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return p.fail(KindAuth, status, nil, "HTTP %d: the endpoint refused the credentials: %s", status, p.errorText(data))
	case status == http.StatusTooManyRequests:
		e := p.fail(KindRateLimited, status, nil, "HTTP %d: rate limited: %s", status, p.errorText(data))
		e.RetryAfter = p.retryAfter(h.Get("Retry-After"))
		return e
	case status >= 400 && status <= 499 && has(contextExceededTexts):
		return p.fail(KindContextExceeded, status, nil, "HTTP %d: the request does not fit the model's context: %s", status, p.errorText(data))
	case status >= 500 && status <= 599 && has(badReplyTexts):
		// The model wrote something the server could not parse (a
		// malformed tool call): the server is fine, and the same request
		// may well get a usable reply, but retrying it here would spend a
		// whole generation each time.
		return p.fail(KindBadReply, status, nil, "HTTP %d: the server could not parse the model's reply: %s", status, p.errorText(data))
	case status >= 500 && status <= 599:
		e := p.fail(KindServer, status, nil, "HTTP %d: server error: %s", status, p.errorText(data))
		e.RetryAfter = p.retryAfter(h.Get("Retry-After"))
		return e
	case status >= 400 && status <= 499:
		return p.fail(KindRequest, status, nil, "HTTP %d: the endpoint refused the request: %s", status, p.errorText(data))
	default:
		return p.fail(KindBadResponse, status, nil, "unexpected HTTP status %d (redirects are not followed)", status)
	}
}

// Preflight is one cheap request, GET {base_url}/models with the key, under
// the per-request timeout and without retries: it checks the endpoint
// answers, accepts the key and lists the configured model, and spends no
// tokens. The body is read up to MaxResponseBodyBytes and must be JSON.
func (p *openAI) Preflight(ctx context.Context) error {
	actx, touch, stop := p.attemptContext(ctx)
	defer stop()
	hreq, err := http.NewRequestWithContext(actx, http.MethodGet, strings.TrimSuffix(p.endpoint, "/chat/completions")+"/models", nil)
	if err != nil {
		return p.fail(KindRequest, 0, err, "building the request: %v", err)
	}
	hreq.Header.Set("Accept", "application/json")
	if p.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.apiKey)
	}
	hresp, err := p.client.Do(hreq)
	if err != nil {
		return p.roundTripError(ctx, actx, err, "sending the request")
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(touchReader{hresp.Body, touch}, MaxResponseBodyBytes+1))
	if err != nil {
		return p.roundTripError(ctx, actx, err, "reading the response")
	}
	if status := hresp.StatusCode; status < 200 || status > 299 {
		return p.statusError(status, hresp.Header, data)
	}
	if len(data) > MaxResponseBodyBytes || !json.Valid(data) {
		return p.fail(KindBadResponse, hresp.StatusCode, nil, "GET /models: the response is not JSON of at most %d bytes", MaxResponseBodyBytes)
	}
	return p.modelListed(data)
}

// maxListedNames bounds how many of the listed models an error names.
const maxListedNames = 5

// modelListed checks that a GET /models answer lists the configured model:
// Ollama and vLLM answer 404 at the first step otherwise. A name matches
// exactly or, as Ollama lists them, with ":latest" added. llama.cpp serves
// its one model under whatever name a request gives, so a list only of
// llama.cpp's models (owned_by "llamacpp") matches any name. A body
// without a "data" list (not the protocol's) is not held against the
// endpoint.
func (p *openAI) modelListed(data []byte) error {
	var list struct {
		Data *[]struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if json.Unmarshal(data, &list) != nil || list.Data == nil {
		return nil
	}
	var ids []string
	llamacpp := len(*list.Data) > 0
	for _, m := range *list.Data {
		if m.ID == p.model || m.ID == p.model+":latest" {
			return nil
		}
		llamacpp = llamacpp && m.OwnedBy == "llamacpp"
		if len(ids) < maxListedNames {
			ids = append(ids, strconv.Quote(excerpt(m.ID, 80)))
		}
	}
	if llamacpp {
		return nil
	}
	listed := "none"
	if len(ids) > 0 {
		listed = strings.Join(ids, ", ")
		if n := len(*list.Data); n > len(ids) {
			listed += fmt.Sprintf(" and %d more", n-len(ids))
		}
	}
	return p.fail(KindRequest, 0, nil, "GET /models does not list the model %q (model.model); it lists %s", excerpt(p.model, 80), listed)
}

// roundTripError classifies a failure to get or read a response: the
// caller's cancel or deadline, the provider's own timeouts, or the
// transport (connection refused, reset, or closed mid-reply).
func (p *openAI) roundTripError(ctx, actx context.Context, err error, doing string) *Error {
	if cerr := ctx.Err(); cerr != nil {
		return ctxError(ctx, cerr)
	}
	switch context.Cause(actx) {
	case errIdleTimeout:
		return p.fail(KindTimeout, 0, context.DeadlineExceeded, "no data from the server within %s (model.timeout_seconds)", p.timeout)
	case errCallTimeout:
		return p.fail(KindTimeout, 0, context.DeadlineExceeded, "the call took longer than %s (model.max_call_seconds)", p.callTimeout)
	}
	return p.fail(KindTransport, 0, err, "%s: %v", doing, err)
}

// fail builds an *Error. Every provider error passes through here, so this
// is the one place the API key is scrubbed from the message.
func (p *openAI) fail(kind ErrorKind, status int, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Status: status, Message: p.redact(fmt.Sprintf(format, args...)), cause: cause}
}

// redact removes the API key from s. It runs before any cut, so a key that
// an endpoint echoes back cannot leak even in part through an excerpt.
func (p *openAI) redact(s string) string {
	if p.apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.apiKey, "[redacted]")
}

// errorText is a bounded excerpt of an error response: the protocol's
// error.message when the body has one (or a top-level message, as older
// vLLM sends), else the body itself.
func (p *openAI) errorText(data []byte) string {
	var body struct {
		Error json.RawMessage `json:"error"`
		Msg   string          `json:"message"`
	}
	text := string(data)
	if json.Unmarshal(data, &body) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(body.Error, &inner) == nil && inner.Message != "":
			text = inner.Message
		case json.Unmarshal(body.Error, &s) == nil && s != "":
			text = s // Ollama: {"error": "..."}
		case body.Msg != "":
			text = body.Msg
		}
	}
	text = p.redact(text)
	if strings.TrimSpace(text) == "" {
		return "(empty body)"
	}
	return strconv.Quote(excerpt(text, maxErrorExcerpt))
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date,
// capped at maxRetryAfter; 0 when absent or unreadable.
func (p *openAI) retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs >= int64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(p.now())
	}
	return min(max(d, 0), maxRetryAfter)
}

// The wire format: the request.

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Tools         []chatTool     `json:"tools,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	Seed          *int           `json:"seed,omitempty"`
	Stop          []string       `json:"stop,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is null on an assistant message that only calls tools, as
	// the protocol has it; some servers refuse "" there.
	Content    *string        `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text inside a JSON string
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatToolFunc `json:"function"`
}

type chatToolFunc struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// emptyObjectSchema stands in for a tool with no declared parameters.
const emptyObjectSchema = `{"type":"object","properties":{}}`

// requestToolNames maps every tool name the request carries: the offered
// tools and the calls in its history, which the provider sees again.
func requestToolNames(req Request) (toolNames, error) {
	var names []string
	for _, t := range req.Tools {
		names = append(names, t.Name)
	}
	for _, m := range req.Messages {
		for _, tc := range m.ToolCalls {
			names = append(names, tc.Name)
		}
	}
	return newToolNames(names)
}

func (p *openAI) encode(req Request, names toolNames) ([]byte, error) {
	opts := req.Options.merge(p.defaults)
	cr := chatRequest{Model: p.model, Messages: make([]chatMessage, len(req.Messages)),
		MaxTokens: opts.MaxTokens, Temperature: opts.Temperature, TopP: opts.TopP, Seed: opts.Seed, Stop: opts.Stop}
	if p.stream {
		cr.Stream, cr.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	for i, m := range req.Messages {
		cm := chatMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			content := m.Content
			cm.Content = &content
		}
		for _, tc := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, chatToolCall{
				ID: tc.ID, Type: "function",
				Function: chatFunction{Name: names.wire(tc.Name), Arguments: tc.Arguments},
			})
		}
		cr.Messages[i] = cm
	}
	for _, t := range req.Tools {
		params := strings.TrimSpace(t.Parameters)
		if params == "" {
			params = emptyObjectSchema
		}
		if !json.Valid([]byte(params)) {
			return nil, p.fail(KindRequest, 0, nil, "tool %q: parameters are not valid JSON", excerpt(t.Name, MaxToolNameBytes))
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, []byte(params)) // valid, checked above
		cr.Tools = append(cr.Tools, chatTool{
			Type:     "function",
			Function: chatToolFunc{Name: names.wire(t.Name), Description: t.Description, Parameters: json.RawMessage(compact.Bytes())},
		})
	}
	body, err := json.Marshal(cr)
	if err != nil {
		return nil, p.fail(KindRequest, 0, err, "encoding the request: %v", err)
	}
	if len(p.extraBody) == 0 {
		return body, nil
	}
	// The server's own options join the body; none of them can replace a
	// field set above (config refuses those names).
	var merged map[string]json.RawMessage
	if err := json.Unmarshal(body, &merged); err != nil {
		return nil, p.fail(KindRequest, 0, err, "encoding the request: %v", err)
	}
	for k, v := range p.extraBody {
		if _, set := merged[k]; !set {
			merged[k] = v
		}
	}
	if body, err = json.Marshal(merged); err != nil {
		return nil, p.fail(KindRequest, 0, err, "encoding the request: %v", err)
	}
	return body, nil
}

// The wire format: the response. Decoding is lenient about extra fields
// (servers add their own) and strict about the ones used.

type wireToolCall struct {
	Index    *int   `json:"index"` // streamed deltas only
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type wireUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content   json.RawMessage `json:"content"`
			ToolCalls []wireToolCall  `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (p *openAI) decode(data []byte, status, priorCalls int, names toolNames) (Response, *Error) {
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return Response{}, p.fail(KindBadResponse, status, err, "the response is not valid chat-completions JSON: %v", err)
	}
	if len(cr.Choices) == 0 {
		if cr.Error != nil && cr.Error.Message != "" {
			return Response{}, p.fail(KindBadResponse, status, nil, "no choices; the endpoint said: %q", excerpt(p.redact(cr.Error.Message), maxErrorExcerpt))
		}
		return Response{}, p.fail(KindBadResponse, status, nil, "the response has no choices")
	}
	ch := cr.Choices[0]
	content, ok := decodeContent(ch.Message.Content)
	if !ok {
		return Response{}, p.fail(KindBadResponse, status, nil, "message.content is neither a string nor a list of text parts")
	}
	if len(ch.Message.ToolCalls) > MaxToolCalls {
		// Checked before building the calls, so a flood costs nothing more.
		return Response{}, p.fail(KindBadReply, status, nil, "%d tool calls in one message; at most %d are accepted", len(ch.Message.ToolCalls), MaxToolCalls)
	}
	calls := make([]ToolCall, 0, len(ch.Message.ToolCalls))
	for i, tc := range ch.Message.ToolCalls {
		args, ok := decodeArguments(tc.Function.Arguments)
		if !ok {
			return Response{}, p.fail(KindBadResponse, status, nil, "tool call %d: arguments are neither a JSON string nor an object", i+1)
		}
		calls = append(calls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
	}
	return p.reply(content, calls, ch.FinishReason, cr.Usage, status, priorCalls, names)
}

// reply checks and assembles a decoded reply, streamed or not.
func (p *openAI) reply(content string, calls []ToolCall, finish string, usage *wireUsage, status, priorCalls int, names toolNames) (Response, *Error) {
	msg := Message{Role: RoleAssistant, Content: content}
	for i, tc := range calls {
		if tc.ID == "" {
			// Some OpenAI-compatible servers omit the ID; the tool result
			// must name one, so make one up the way the scripted provider
			// does.
			tc.ID = "call_" + strconv.Itoa(priorCalls+i+1)
		}
		tc.Name = names.host(tc.Name)
		msg.ToolCalls = append(msg.ToolCalls, tc)
	}
	if problem := checkReply(&msg); problem != "" {
		return Response{}, p.fail(KindBadReply, status, nil, "%s", problem)
	}
	resp := Response{Message: msg, FinishReason: excerpt(finish, 32)}
	if usage != nil {
		resp.Usage = Usage{PromptTokens: max(usage.PromptTokens, 0), CompletionTokens: max(usage.CompletionTokens, 0), Reported: true}
	}
	return resp, nil
}

// decodeContent accepts the protocol's string or null, and the list of
// {"type":"text","text":...} parts some servers send.
func decodeContent(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, part := range parts {
		if part.Type == "text" || part.Type == "" {
			b.WriteString(part.Text)
		}
	}
	return b.String(), true
}

// decodeArguments accepts the protocol's JSON-in-a-string, and the bare
// object some servers send; no arguments become "{}".
func decodeArguments(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "{}", true
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		if strings.TrimSpace(s) == "" {
			return "{}", true
		}
		return s, true
	case '{':
		return string(raw), true
	}
	return "", false
}
