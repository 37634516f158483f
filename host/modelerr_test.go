package host

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// A model provider that answers 5xx or 429 (after the provider's retries),
// does not answer in time, or cannot be reached reaches the executor as a
// typed model outage (sdk.ErrModelUnavailable, "model_unavailable"), not as
// the host being gone; a task whose executor gives up on it ends
// interrupted (model_unavailable), resumable, not failed (executor_failed);
// and the daemon logs it.
func TestModelOutageIsTypedAndInterrupts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens on the endpoint
		calls   int64            // requests the endpoint should see per model call
	}{
		{"503", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
		}, 2},
		{"429", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
		}, 2},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}, 1},
		{"connection refused", nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			url := closedURL(t)
			if tc.handler != nil {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					io.Copy(io.Discard, r.Body)
					tc.handler(w, r)
				}))
				t.Cleanup(srv.Close)
				url = srv.URL
			}
			var logs syncBuffer
			cfg := testConfig(t)
			cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: url + "/v1", Name: "test", TimeoutSeconds: 1, MaxRetries: 1}
			h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t),
				Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close(context.Background()) })

			// The shipped executor gives up on the outage: the task is
			// interrupted with the outage's reason.
			task := waitEnd(t, h, alice, legacyTask(t, h, "use the model").ID)
			wantStatus(t, task, store.StatusInterrupted, store.ReasonModelUnavailable)
			if got := hits.Load(); got != tc.calls {
				t.Errorf("the endpoint saw %d requests, want %d (the provider's own retries)", got, tc.calls)
			}
			if !strings.Contains(logs.String(), "model unavailable") {
				t.Errorf("the daemon did not log the outage:\n%s", logs.String())
			}

			// What the executor is told: a model outage, not a missing host.
			other := create(t, h, alice, map[string]any{"call_model": true}, Limits{Steps: 1})
			waitEnd(t, h, alice, other.ID)
			atts, err := h.Store.ListAttempts(context.Background(), alice, other.ID)
			if err != nil || len(atts) != 1 {
				t.Fatalf("attempts = %+v, %v", atts, err)
			}
			if atts[0].Summary != "model error: model_unavailable" {
				t.Errorf("the executor saw %q, want model error: model_unavailable", atts[0].Summary)
			}
		})
	}
}

// closedURL is an http URL on which nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// Every kind of model failure reaches the executor, through the real SDK, as
// a *sdk.ModelError of the matching kind, with the provider's words once
// ("model <kind>: <message>"), the transient ones also matching
// sdk.ErrModelUnavailable; and the daemon logs each failed call once at
// WARN with the task id.
func TestModelErrorKindsReachExecutor(t *testing.T) {
	t.Parallel()
	raw := func(code int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(code)
			io.WriteString(w, body)
		}
	}
	body := func(code int, msg string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			io.WriteString(w, `{"error":{"message":"`+msg+`"}}`)
		}
	}
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string // the attempt's summary: what the executor saw
		log     string
	}{
		{"401", body(401, "bad key"),
			"model error: model_error: auth: model auth: HTTP 401: the endpoint refused the credentials: \"bad key\"", "model refused the credentials"},
		{"429", body(429, "slow down"),
			"model error: model_unavailable: rate_limited: model rate_limited: HTTP 429: rate limited: \"slow down\" (after 2 attempts)", "model unavailable"},
		{"503", body(503, "overloaded"),
			"model error: model_unavailable: server: model server: HTTP 503: server error: \"overloaded\" (after 2 attempts)", "model unavailable"},
		{"timeout", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			"model error: model_unavailable: timeout: model timeout: no data from the server within 1s (model.timeout_seconds)", "model unavailable"},
		{"bad body", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices": [`) },
			"model error: model_error: bad_response: model bad_response: the response is not valid chat-completions JSON: unexpected end of JSON input", "model call failed"},
		{"400", body(400, "no such model"),
			"model error: model_error: request: model request: HTTP 400: the endpoint refused the request: \"no such model\"", "model call failed"},
		// llama.cpp's own bodies (docs/model.md): a tool call it could not
		// parse is the model's bad reply, not an outage, and is not
		// retried; a request longer than its context is its own kind.
		{"llama.cpp bad reply", raw(500, llamaBadReplyBody),
			"model error: model_error: bad_reply: model bad_reply: HTTP 500: the server could not parse the model's reply: \"The model produced output that does not match the expected peg-native format\"", "model reply not usable"},
		{"llama.cpp context", raw(400, llamaContextBody),
			"model error: model_error: context_exceeded: model context_exceeded: HTTP 400: the request does not fit the model's context: \"request (5318 tokens) exceeds the available context size (2048 tokens), try increasing it\"", "model request longer than the model's context"},
		// A server killed mid-reply: the connection closes with no
		// response; a transport failure, not a timeout.
		{"connection closed", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, "model error: model_unavailable: transport: model transport: sending the request: Post \"URL/v1/chat/completions\": EOF", "model unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				tc.handler(w, r)
			}))
			t.Cleanup(srv.Close)
			var logs syncBuffer
			cfg := testConfig(t)
			cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 1, MaxRetries: 1}
			h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t),
				Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close(context.Background()) })

			task := create(t, h, alice, map[string]any{"call_model": true, "model_error_text": true}, Limits{Steps: 1})
			waitEnd(t, h, alice, task.ID)
			atts, err := h.Store.ListAttempts(context.Background(), alice, task.ID)
			if err != nil || len(atts) != 1 {
				t.Fatalf("attempts = %+v, %v", atts, err)
			}
			if want := strings.ReplaceAll(tc.want, "URL", srv.URL); atts[0].Summary != want {
				t.Errorf("the executor saw\n%q, want\n%q", atts[0].Summary, want)
			}
			var lines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, tc.log+":") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "[WARN]") || !strings.Contains(lines[0], "task="+task.ID) {
				t.Errorf("want one WARN %q line with task=%s, got %q in:\n%s", tc.log, task.ID, lines, logs.String())
			}
		})
	}
}

// What llama-server (llama.cpp, --jinja) answers, byte for byte: a tool call
// the chat format's parser refused, and a request longer than -c.
const (
	llamaBadReplyBody = `{"error":{"code":500,"message":"The model produced output that does not match the expected peg-native format","type":"server_error"}}`
	llamaContextBody  = `{"error":{"code":400,"message":"request (5318 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5318,"n_ctx":2048}}`
)
