package host

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// A model endpoint that refuses the credentials (401 or 403) fails the task
// with its own reason, model_auth, not executor_failed; the message quotes
// the endpoint once, without the "model: model:" of each layer's wrapping;
// the daemon logs it; and the refusal is not retried.
func TestModelAuthFailsTask(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			var hits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
			}))
			t.Cleanup(srv.Close)
			var logs syncBuffer
			cfg := testConfig(t)
			cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 5, MaxRetries: 2}
			h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t),
				Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close(context.Background()) })

			task := waitEnd(t, h, alice, legacyTask(t, h, "use the model").ID)
			wantStatus(t, task, store.StatusFailed, store.ReasonModelAuth)
			if got := hits.Load(); got != 1 {
				t.Errorf("the endpoint saw %d requests, want 1: a refused key is not retried", got)
			}
			want := "model auth: HTTP " + strconv.Itoa(code) + `: the endpoint refused the credentials: "Incorrect API key provided"; check the key named by [model] api_key_env`
			if task.Message != want {
				t.Errorf("message = %q, want %q", task.Message, want)
			}
			if !strings.Contains(logs.String(), "model refused the credentials") {
				t.Errorf("the daemon did not log the refusal:\n%s", logs.String())
			}
		})
	}
}
