package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/taskhost/taskhost/host/config"
)

// canaryKey is the API key of every test; it must never show in an error.
const canaryKey = "sk-canary-7f3a9c-DO-NOT-LEAK"

const testKeyEnv = "TASKHOST_TEST_MODEL_KEY"

// fakeAPI is a local OpenAI-compatible endpoint. Each test gives it a handler
// that sees the 1-based request number; it records every request.
type fakeAPI struct {
	srv *httptest.Server

	mu   sync.Mutex
	reqs []recordedRequest
}

type recordedRequest struct {
	method, path string
	header       http.Header
	body         []byte
}

func newFakeAPI(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body)) // the handler may read it too
		f.mu.Lock()
		f.reqs = append(f.reqs, recordedRequest{r.Method, r.URL.Path, r.Header.Clone(), body})
		n := len(f.reqs)
		f.mu.Unlock()
		handle(w, r, n)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) requests() []recordedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recordedRequest(nil), f.reqs...)
}

// sleepRecorder stands in for the backoff sleep: it records the wait and
// returns at once (or with ctx's error when ctx has ended).
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) recorded() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

const testBackoffBase = 8 * time.Millisecond

func openAIConfig(baseURL string) config.Model {
	return config.Model{
		Provider:       config.ProviderOpenAI,
		BaseURL:        baseURL + "/v1/",
		Name:           "test-model",
		APIKeyEnv:      testKeyEnv,
		TimeoutSeconds: 30,
		MaxRetries:     2,
	}
}

func canaryEnv(name string) string {
	if name == testKeyEnv {
		return canaryKey
	}
	return ""
}

// newTestOpenAI builds an openai provider for f with a recorded sleep and a
// small backoff base.
func newTestOpenAI(t *testing.T, f *fakeAPI, opts ...Option) (Provider, *sleepRecorder) {
	t.Helper()
	rec := &sleepRecorder{}
	opts = append([]Option{withSleep(rec.sleep), withBackoffBase(testBackoffBase)}, opts...)
	p, err := New(openAIConfig(f.srv.URL), canaryEnv, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, rec
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// echoAuth returns an error body that reflects the Authorization header, as
// a careless proxy might: the key must still never reach an error.
func echoAuth(r *http.Request) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "bad key " + r.Header.Get("Authorization")}})
	return string(b)
}

func assertNoCanary(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
		if strings.Contains(s, canaryKey) || strings.Contains(s, canaryKey[:12]) {
			t.Fatalf("the API key leaked into an error: %s", s)
		}
	}
}

func textRequest() Request {
	return Request{Messages: []Message{
		{Role: RoleSystem, Content: "be brief"},
		{Role: RoleUser, Content: "say hello"},
	}}
}

func TestOpenAIText(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"total_tokens":3}}`)
	})
	p, _ := newTestOpenAI(t, f)
	resp, err := p.Complete(context.Background(), textRequest())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Message{Role: RoleAssistant, Content: "hello"}); !reflect.DeepEqual(resp.Message, want) {
		t.Errorf("reply = %+v, want %+v", resp.Message, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != http.MethodPost || r.path != "/v1/chat/completions" {
		t.Errorf("request %s %s, want POST /v1/chat/completions", r.method, r.path)
	}
	if got := r.header.Get("Authorization"); got != "Bearer "+canaryKey {
		t.Errorf("Authorization = %q, want the bearer key", got)
	}
	if got := r.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"model": "test-model",
		"messages": []any{
			map[string]any{"role": "system", "content": "be brief"},
			map[string]any{"role": "user", "content": "say hello"},
		},
	}
	if !reflect.DeepEqual(body, want) {
		t.Errorf("request body = %s\nwant %v", r.body, want)
	}
}

func TestOpenAIToolCalls(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_abc","type":"function","function":{"name":"workspace.write","arguments":"{\"path\":\"a.md\",\"content\":\"hi\"}"}},
			{"type":"function","function":{"name":"time.sleep","arguments":{"seconds":1}}},
			{"id":"call_x","type":"function","function":{"name":"workspace.list","arguments":""}}
		]},"finish_reason":"tool_calls"}]}`)
	})
	p, _ := newTestOpenAI(t, f)
	req := Request{
		Messages: []Message{
			{Role: RoleUser, Content: "go"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "shell.run", Arguments: `{"command":"ls"}`}}},
			{Role: RoleTool, ToolCallID: "call_1", Content: "a.md"},
		},
		Tools: []ToolSpec{
			{Name: "workspace.write", Description: "write a file", Parameters: `{"type":"object","properties":{"path":{"type":"string"}}}`},
			{Name: "workspace.list"},
		},
	}
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := Message{Role: RoleAssistant, ToolCalls: []ToolCall{
		{ID: "call_abc", Name: "workspace.write", Arguments: `{"path":"a.md","content":"hi"}`},
		{ID: "call_3", Name: "time.sleep", Arguments: `{"seconds":1}`}, // no id: numbered after the history's one call
		{ID: "call_x", Name: "workspace.list", Arguments: `{}`},
	}}
	if !reflect.DeepEqual(resp.Message, want) {
		t.Errorf("reply = %+v\nwant %+v", resp.Message, want)
	}

	var body struct {
		Messages []map[string]any `json:"messages"`
		Tools    []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(f.requests()[0].body, &body); err != nil {
		t.Fatal(err)
	}
	wantTools := []map[string]any{
		{"type": "function", "function": map[string]any{"name": "workspace_write", "description": "write a file",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}},
		{"type": "function", "function": map[string]any{"name": "workspace_list",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{}}}},
	}
	if !reflect.DeepEqual(body.Tools, wantTools) {
		t.Errorf("tools = %v\nwant %v", body.Tools, wantTools)
	}
	wantMsgs := []map[string]any{
		{"role": "user", "content": "go"},
		{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function", "function": map[string]any{"name": "shell_run", "arguments": `{"command":"ls"}`}}}},
		{"role": "tool", "content": "a.md", "tool_call_id": "call_1"},
	}
	if !reflect.DeepEqual(body.Messages, wantMsgs) {
		t.Errorf("messages = %v\nwant %v", body.Messages, wantMsgs)
	}
}

// TestOpenAIFailures covers every answer that ends in an error: the kind,
// the number of requests, the waits between them, and that the echoed key
// never reaches the error.
func TestOpenAIFailures(t *testing.T) {
	within := func(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }
	backoffOK := func(waits []time.Duration) bool {
		for i, w := range waits {
			full := testBackoffBase << i
			if !within(w, full/2, full) {
				return false
			}
		}
		return true
	}
	var manyCalls []string
	for i := range MaxToolCalls + 1 {
		manyCalls = append(manyCalls, fmt.Sprintf(`{"id":"c%d","function":{"name":"t","arguments":"{}"}}`, i))
	}
	tests := []struct {
		name      string
		handle    func(w http.ResponseWriter, r *http.Request)
		kind      ErrorKind
		status    int
		requests  int
		waitsOK   func([]time.Duration) bool
		msgPart   string
		retryWait time.Duration
	}{
		{name: "401", handle: func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 401, echoAuth(r)) },
			kind: KindAuth, status: 401, requests: 1, msgPart: "bad key Bearer [redacted]"},
		{name: "403", handle: func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 403, echoAuth(r)) },
			kind: KindAuth, status: 403, requests: 1},
		{name: "400", handle: func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 400, echoAuth(r)) },
			kind: KindRequest, status: 400, requests: 1},
		{name: "500 retried then exhausted", handle: func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 500, echoAuth(r)) },
			kind: KindServer, status: 500, requests: 3, waitsOK: backoffOK, msgPart: "after 3 attempts"},
		{name: "502 plain-text body", handle: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			io.WriteString(w, "upstream "+r.Header.Get("Authorization")+strings.Repeat(" pad", 200))
		}, kind: KindServer, status: 502, requests: 3, waitsOK: backoffOK},
		{name: "key across the excerpt cut", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 500, strings.Repeat("x", maxErrorExcerpt-10)+r.Header.Get("Authorization"))
		}, kind: KindServer, status: 500, requests: 3, waitsOK: backoffOK},
		{name: "429 exhausted keeps Retry-After", handle: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "2")
			writeJSON(w, 429, echoAuth(r))
		}, kind: KindRateLimited, status: 429, requests: 3, retryWait: 2 * time.Second,
			waitsOK: func(w []time.Duration) bool {
				return reflect.DeepEqual(w, []time.Duration{2 * time.Second, 2 * time.Second})
			}},
		{name: "malformed JSON", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, `{"choices":[{"message":`+r.Header.Get("Authorization"))
		}, kind: KindBadResponse, status: 200, requests: 1},
		{name: "JSON of the wrong shape", handle: func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, `{"choices":"many"}`) },
			kind: KindBadResponse, status: 200, requests: 1},
		{name: "no choices", handle: func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, `{"choices":[]}`) },
			kind: KindBadResponse, status: 200, requests: 1, msgPart: "no choices"},
		{name: "no choices with an error object", handle: func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, echoAuth(r)) },
			kind: KindBadResponse, status: 200, requests: 1, msgPart: "[redacted]"},
		{name: "content of the wrong type", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, `{"choices":[{"message":{"content":42}}]}`)
		}, kind: KindBadResponse, status: 200, requests: 1},
		{name: "arguments of the wrong type", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, `{"choices":[{"message":{"tool_calls":[{"id":"a","function":{"name":"t","arguments":[1]}}]}}]}`)
		}, kind: KindBadResponse, status: 200, requests: 1},
		{name: "too many tool calls", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, `{"choices":[{"message":{"tool_calls":[`+strings.Join(manyCalls, ",")+`]}}]}`)
		}, kind: KindBadReply, status: 200, requests: 1, msgPart: "17 tool calls"},
		{name: "tool name too long", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, `{"choices":[{"message":{"tool_calls":[{"id":"a","function":{"name":"`+strings.Repeat("n", 65)+`","arguments":"{}"}}]}}]}`)
		}, kind: KindBadReply, status: 200, requests: 1},
		{name: "tool without a name", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, `{"choices":[{"message":{"tool_calls":[{"id":"a","function":{"arguments":"{}"}}]}}]}`)
		}, kind: KindBadReply, status: 200, requests: 1},
		{name: "arguments too big", handle: func(w http.ResponseWriter, r *http.Request) {
			args, _ := json.Marshal(`{"a":"` + strings.Repeat("x", MaxArgumentsBytes) + `"}`)
			writeJSON(w, 200, `{"choices":[{"message":{"tool_calls":[{"id":"a","function":{"name":"t","arguments":`+string(args)+`}}]}}]}`)
		}, kind: KindBadReply, status: 200, requests: 1},
		{name: "oversized body", handle: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, `{"choices":[{"message":{"content":"`+strings.Repeat("x", MaxResponseBodyBytes)+`"}}]}`)
		}, kind: KindBadResponse, status: 200, requests: 1, msgPart: "exceeds"},
		{name: "redirect not followed", handle: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		}, kind: KindBadResponse, status: 302, requests: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { tt.handle(w, r) })
			p, rec := newTestOpenAI(t, f)
			_, err := p.Complete(context.Background(), textRequest())
			assertNoCanary(t, err)
			merr := wantKind(t, err, tt.kind)
			if merr.Status != tt.status {
				t.Errorf("status = %d, want %d", merr.Status, tt.status)
			}
			if got := len(f.requests()); got != tt.requests {
				t.Errorf("%d requests, want %d", got, tt.requests)
			}
			waits := rec.recorded()
			if tt.waitsOK == nil && len(waits) != 0 {
				t.Errorf("waits %v, want none", waits)
			}
			if tt.waitsOK != nil && !tt.waitsOK(waits) {
				t.Errorf("waits %v are not the expected backoff", waits)
			}
			if tt.msgPart != "" && !strings.Contains(merr.Message, tt.msgPart) {
				t.Errorf("message %q does not contain %q", merr.Message, tt.msgPart)
			}
			if merr.RetryAfter != tt.retryWait {
				t.Errorf("RetryAfter = %v, want %v", merr.RetryAfter, tt.retryWait)
			}
			if len(merr.Message) > 1024 {
				t.Errorf("message is %d bytes: not bounded", len(merr.Message))
			}
		})
	}
}

func TestOpenAIRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	backoff := func(d time.Duration) bool { return d >= testBackoffBase/2 && d <= testBackoffBase }
	exactly := func(want time.Duration) func(time.Duration) bool {
		return func(d time.Duration) bool { return d == want }
	}
	tests := []struct {
		name   string
		status int
		header string
		wait   func(time.Duration) bool
	}{
		{"429 seconds", 429, "7", exactly(7 * time.Second)},
		{"429 HTTP date", 429, now.Add(5 * time.Second).Format(http.TimeFormat), exactly(5 * time.Second)},
		{"429 capped at 60s", 429, "3600", exactly(60 * time.Second)},
		{"429 date capped at 60s", 429, now.Add(time.Hour).Format(http.TimeFormat), exactly(60 * time.Second)},
		{"429 date in the past", 429, now.Add(-time.Hour).Format(http.TimeFormat), backoff},
		{"429 zero", 429, "0", backoff},
		{"429 garbage", 429, "soon", backoff},
		{"429 none", 429, "", backoff},
		{"503 seconds", 503, "3", exactly(3 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 1 {
					if tt.header != "" {
						w.Header().Set("Retry-After", tt.header)
					}
					writeJSON(w, tt.status, `{"error":{"message":"slow down"}}`)
					return
				}
				writeJSON(w, 200, `{"choices":[{"message":{"content":"ok"}}]}`)
			})
			p, rec := newTestOpenAI(t, f, withClock(func() time.Time { return now }))
			resp, err := p.Complete(context.Background(), textRequest())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != "ok" {
				t.Errorf("content = %q", resp.Message.Content)
			}
			waits := rec.recorded()
			if len(waits) != 1 || !tt.wait(waits[0]) {
				t.Errorf("waits = %v", waits)
			}
			if n := len(f.requests()); n != 2 {
				t.Errorf("%d requests, want 2", n)
			}
		})
	}
}

// TestOpenAICancelMidFlight cancels a request the server is holding: the
// client must return at once with Canceled, and the server must see its
// request context end (the connection is dropped, not left hanging).
func TestOpenAICancelMidFlight(t *testing.T) {
	started := make(chan struct{})
	serverSawEnd := make(chan struct{})
	release := make(chan struct{})
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		close(started)
		select {
		case <-r.Context().Done():
			close(serverSawEnd)
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	p, rec := newTestOpenAI(t, f)

	cancelMidFlight(t, p, started, serverSawEnd)
	if w := rec.recorded(); len(w) != 0 {
		t.Errorf("waits %v: a cancel is not retried", w)
	}
}

// cancelMidFlight cancels a call of p once started is closed, and checks
// that it returns at once with Canceled and that the server then sees the
// request end (closed is closed).
func cancelMidFlight(t *testing.T, p Provider, started, closed <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Complete(ctx, textRequest())
		done <- err
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		wantKind(t, err, KindCanceled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("errors.Is(%v, context.Canceled) = false", err)
		}
	case <-time.After(10 * time.Second): // a failure bound, not synchronisation
		t.Fatal("Complete did not return after cancel")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the request end")
	}
}

// TestOpenAICancelDuringBackoff cancels while the real backoff sleep waits
// out a one-hour backoff: only honouring ctx lets Complete return.
func TestOpenAICancelDuringBackoff(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 500, `{}`) })
	sleeping := make(chan time.Duration, 1)
	realSleep := func(ctx context.Context, d time.Duration) error {
		sleeping <- d
		return sleepCtx(ctx, d)
	}
	p, err := New(openAIConfig(f.srv.URL), canaryEnv, withBackoffBase(time.Hour), withSleep(realSleep))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Complete(ctx, textRequest())
		done <- err
	}()
	if d := <-sleeping; d < maxBackoff/2 || d > maxBackoff {
		t.Errorf("backoff %v, want the capped backoff (%v at most)", d, maxBackoff)
	}
	cancel()
	select {
	case err := <-done:
		wantKind(t, err, KindCanceled)
	case <-time.After(10 * time.Second): // a failure bound, not synchronisation
		t.Fatal("the backoff sleep ignored the cancelled context")
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestOpenAITimeout(t *testing.T) {
	hold := func(w http.ResponseWriter, r *http.Request, n int) { <-r.Context().Done() }
	t.Run("per-request timeout", func(t *testing.T) {
		f := newFakeAPI(t, hold)
		p, rec := newTestOpenAI(t, f, withAttemptTimeout(50*time.Millisecond))
		_, err := p.Complete(context.Background(), textRequest())
		merr := wantKind(t, err, KindTimeout)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(merr.Message, "50ms") {
			t.Errorf("error %v: want DeadlineExceeded and the timeout named", err)
		}
		if n := len(f.requests()); n != 1 || len(rec.recorded()) != 0 {
			t.Errorf("%d requests, waits %v: a timeout is not retried", n, rec.recorded())
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		f := newFakeAPI(t, hold)
		p, _ := newTestOpenAI(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := p.Complete(ctx, textRequest())
		wantKind(t, err, KindTimeout)
	})
}

func TestOpenAITransportError(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	p, rec := newTestOpenAI(t, f)
	f.srv.Close() // nothing listens any more
	_, err := p.Complete(context.Background(), textRequest())
	assertNoCanary(t, err)
	wantKind(t, err, KindTransport)
	if len(rec.recorded()) != 0 {
		t.Error("a transport error was retried")
	}
}

func TestOpenAIBodyAtLimit(t *testing.T) {
	const reply = `{"choices":[{"message":{"content":"ok"}}]}`
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, reply+strings.Repeat(" ", MaxResponseBodyBytes-len(reply)))
	})
	p, _ := newTestOpenAI(t, f)
	resp, err := p.Complete(context.Background(), textRequest())
	if err != nil || resp.Message.Content != "ok" {
		t.Fatalf("a body of exactly %d bytes: %+v, %v", MaxResponseBodyBytes, resp, err)
	}
}

func TestOpenAIContentCut(t *testing.T) {
	long := strings.Repeat("é", MaxContentBytes) // 2 bytes each: twice the bound
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"content": long}}}})
		writeJSON(w, 200, string(b))
	})
	p, _ := newTestOpenAI(t, f)
	resp, err := p.Complete(context.Background(), textRequest())
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Message.Content
	if len(c) != MaxContentBytes || !utf8.ValidString(c) || !strings.HasPrefix(long, c) {
		t.Errorf("content cut to %d bytes (valid UTF-8: %v), want %d", len(c), utf8.ValidString(c), MaxContentBytes)
	}
}

func TestOpenAIContentParts(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, `{"choices":[{"message":{"content":[{"type":"text","text":"hel"},{"type":"image_url"},{"type":"text","text":"lo"}]}}]}`)
	})
	p, _ := newTestOpenAI(t, f)
	resp, err := p.Complete(context.Background(), textRequest())
	if err != nil || resp.Message.Content != "hello" {
		t.Fatalf("%+v, %v", resp, err)
	}
}

func TestOpenAIRequestChecks(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 200, `{}`) })
	p, _ := newTestOpenAI(t, f)
	tests := []struct {
		name string
		req  Request
	}{
		{"no messages", Request{}},
		{"tool schema not JSON", Request{Messages: textRequest().Messages, Tools: []ToolSpec{{Name: "t", Parameters: "{type: object"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Complete(context.Background(), tt.req)
			wantKind(t, err, KindRequest)
		})
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests sent for refused requests", n)
	}
}

func TestOpenAINoKey(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, `{"choices":[{"message":{"content":"ok"}}]}`)
	})
	cfg := openAIConfig(f.srv.URL)
	cfg.APIKeyEnv = "" // a local server needs no key
	p, err := New(cfg, canaryEnv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(context.Background(), textRequest()); err != nil {
		t.Fatal(err)
	}
	if h, ok := f.requests()[0].header["Authorization"]; ok {
		t.Errorf("Authorization sent without a key: %q", h)
	}
}

func TestOpenAIConcurrent(t *testing.T) {
	// Each caller's first request fails with 503 and its retry succeeds,
	// however the callers interleave.
	var mu sync.Mutex
	seen := map[string]bool{}
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		b, _ := io.ReadAll(r.Body)
		body := string(b)
		mu.Lock()
		retry := seen[body]
		seen[body] = true
		mu.Unlock()
		if !retry {
			writeJSON(w, 503, `{}`)
			return
		}
		writeJSON(w, 200, `{"choices":[{"message":{"content":"ok"}}]}`)
	})
	p, rec := newTestOpenAI(t, f)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			req := Request{Messages: []Message{{Role: RoleUser, Content: fmt.Sprintf("caller %d", i)}}}
			if _, err := p.Complete(context.Background(), req); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n, w := len(f.requests()), len(rec.recorded()); n != 16 || w != 8 {
		t.Errorf("%d requests and %d waits, want 16 and 8", n, w)
	}
}

func TestNewErrors(t *testing.T) {
	ok := openAIConfig("http://127.0.0.1:9")
	tests := []struct {
		name   string
		mutate func(*config.Model)
		getenv func(string) string
		want   string
	}{
		{"unknown provider", func(c *config.Model) { c.Provider = "claude" }, canaryEnv, `unknown provider "claude"`},
		{"key variable empty", func(c *config.Model) {}, func(string) string { return "" }, testKeyEnv + " (model.api_key_env) is empty or unset"},
		{"literal key refused", func(c *config.Model) { c.APIKey = canaryKey }, canaryEnv, "literal api_key is refused"},
		{"bad base_url", func(c *config.Model) { c.BaseURL = "ftp://x" }, canaryEnv, "not an http(s) URL"},
		{"no model name", func(c *config.Model) { c.Name = "" }, canaryEnv, "no model name"},
		{"negative timeout", func(c *config.Model) { c.TimeoutSeconds = -1 }, canaryEnv, "timeout_seconds = -1"},
		{"too many retries", func(c *config.Model) { c.MaxRetries = 11 }, canaryEnv, "max_retries = 11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mutate(&cfg)
			_, err := New(cfg, tt.getenv)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
			assertNoCanary(t, err)
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	p := &openAI{backoffBase: 100 * time.Millisecond}
	for retry := range 12 {
		full := min(p.backoffBase<<retry, maxBackoff)
		for range 50 {
			if d := p.backoff(retry); d < full/2 || d > full {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", retry, d, full/2, full)
			}
		}
	}
	if d := p.backoff(1000); d < maxBackoff/2 || d > maxBackoff {
		t.Errorf("backoff(1000) = %v: overflow not capped", d)
	}
}
