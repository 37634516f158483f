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
	"github.com/taskhost/taskhost/store"
)

// A model provider that answers 5xx or 429 (after the provider's retries),
// does not answer in time, or cannot be reached reaches the executor as a
// typed model outage (sdk.ErrModelUnavailable, "model_unavailable"), not as
// the host being gone; a task whose executor gives up on it ends
// interrupted (model_unavailable), resumable, not failed (executor_failed);
// and the daemon logs it.
func TestModelOutageIsTypedAndInterrupts(t *testing.T) {
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
			cfg := testConfig()
			cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: url + "/v1", Name: "test", TimeoutSeconds: 1, MaxRetries: 1}
			h, err := Open(context.Background(), Options{DataDir: shortTempDir(t), Config: cfg, ExecutorDir: executorDir,
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
