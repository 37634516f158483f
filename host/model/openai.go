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
	"strconv"
	"strings"
	"time"

	"github.com/taskhost/taskhost/host/config"
)

const (
	defaultTimeout     = 60 * time.Second
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

// errAttemptTimeout is the cause of an attempt's context when the
// per-request timeout, not the caller, ended it.
var errAttemptTimeout = errors.New("model request timeout")

// openAI speaks the OpenAI-compatible chat-completions protocol. Its fields
// are set once by newOpenAI; it is safe for concurrent use.
type openAI struct {
	endpoint    string
	model       string
	apiKey      string // sent only as the Authorization header; never in an error
	client      *http.Client
	timeout     time.Duration
	maxRetries  int
	backoffBase time.Duration
	sleep       func(ctx context.Context, d time.Duration) error
	now         func() time.Time
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
	return &openAI{
		endpoint:    strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		model:       cfg.Name,
		apiKey:      key,
		client:      client,
		timeout:     timeout,
		maxRetries:  cfg.MaxRetries,
		backoffBase: o.backoffBase,
		sleep:       o.sleep,
		now:         o.now,
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
		resp, ferr := p.attempt(ctx, body, priorCalls, names)
		if ferr == nil {
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

// attempt is one HTTP round trip under the per-request timeout.
func (p *openAI) attempt(ctx context.Context, body []byte, priorCalls int, names toolNames) (Response, *Error) {
	actx, cancel := context.WithTimeoutCause(ctx, p.timeout, errAttemptTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return Response{}, p.fail(KindRequest, 0, err, "building the request: %v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if p.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.apiKey)
	}
	hresp, err := p.client.Do(hreq)
	if err != nil {
		return Response{}, p.roundTripError(ctx, actx, err, "sending the request")
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, MaxResponseBodyBytes+1))
	if err != nil {
		return Response{}, p.roundTripError(ctx, actx, err, "reading the response")
	}
	status := hresp.StatusCode
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

// statusError classifies a response that is not a 2xx.
func (p *openAI) statusError(status int, h http.Header, data []byte) *Error {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return p.fail(KindAuth, status, nil, "HTTP %d: the endpoint refused the credentials: %s", status, p.errorText(data))
	case status == http.StatusTooManyRequests:
		e := p.fail(KindRateLimited, status, nil, "HTTP %d: rate limited: %s", status, p.errorText(data))
		e.RetryAfter = p.retryAfter(h.Get("Retry-After"))
		return e
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
// answers and accepts the key, and spends no tokens. The body is read up to
// MaxResponseBodyBytes and must be JSON.
func (p *openAI) Preflight(ctx context.Context) error {
	actx, cancel := context.WithTimeoutCause(ctx, p.timeout, errAttemptTimeout)
	defer cancel()
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
	data, err := io.ReadAll(io.LimitReader(hresp.Body, MaxResponseBodyBytes+1))
	if err != nil {
		return p.roundTripError(ctx, actx, err, "reading the response")
	}
	if status := hresp.StatusCode; status < 200 || status > 299 {
		return p.statusError(status, hresp.Header, data)
	}
	if len(data) > MaxResponseBodyBytes || !json.Valid(data) {
		return p.fail(KindBadResponse, hresp.StatusCode, nil, "GET /models: the response is not JSON of at most %d bytes", MaxResponseBodyBytes)
	}
	return nil
}

// roundTripError classifies a failure to get or read a response: the
// caller's cancel or deadline, the per-request timeout, or the transport.
func (p *openAI) roundTripError(ctx, actx context.Context, err error, doing string) *Error {
	if cerr := ctx.Err(); cerr != nil {
		return ctxError(ctx, cerr)
	}
	if errors.Is(context.Cause(actx), errAttemptTimeout) {
		return p.fail(KindTimeout, 0, context.DeadlineExceeded, "no response within %s", p.timeout)
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
// error.message when the body has one, else the body itself.
func (p *openAI) errorText(data []byte) string {
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	text := string(data)
	if json.Unmarshal(data, &body) == nil && body.Error.Message != "" {
		text = body.Error.Message
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
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Tools    []chatTool    `json:"tools,omitempty"`
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
	cr := chatRequest{Model: p.model, Messages: make([]chatMessage, len(req.Messages))}
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
		cr.Tools = append(cr.Tools, chatTool{
			Type:     "function",
			Function: chatToolFunc{Name: names.wire(t.Name), Description: t.Description, Parameters: json.RawMessage(params)},
		})
	}
	body, err := json.Marshal(cr)
	if err != nil {
		return nil, p.fail(KindRequest, 0, err, "encoding the request: %v", err)
	}
	return body, nil
}

// The wire format: the response. Decoding is lenient about extra fields
// (servers add their own) and strict about the ones used.

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
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
	cm := cr.Choices[0].Message
	content, ok := decodeContent(cm.Content)
	if !ok {
		return Response{}, p.fail(KindBadResponse, status, nil, "message.content is neither a string nor a list of text parts")
	}
	msg := Message{Role: RoleAssistant, Content: content}
	if len(cm.ToolCalls) > MaxToolCalls {
		// Checked before building the calls, so a flood costs nothing more.
		return Response{}, p.fail(KindBadResponse, status, nil, "%d tool calls in one message; at most %d are accepted", len(cm.ToolCalls), MaxToolCalls)
	}
	for i, tc := range cm.ToolCalls {
		args, ok := decodeArguments(tc.Function.Arguments)
		if !ok {
			return Response{}, p.fail(KindBadResponse, status, nil, "tool call %d: arguments are neither a JSON string nor an object", i+1)
		}
		id := tc.ID
		if id == "" {
			// Some OpenAI-compatible servers omit the ID; the tool result
			// must name one, so make one up the way the scripted provider
			// does.
			id = "call_" + strconv.Itoa(priorCalls+i+1)
		}
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: id, Name: names.host(tc.Function.Name), Arguments: args})
	}
	if problem := checkReply(&msg); problem != "" {
		return Response{}, p.fail(KindBadResponse, status, nil, "%s", problem)
	}
	return Response{Message: msg}, nil
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
