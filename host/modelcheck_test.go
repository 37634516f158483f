package host

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/internal/testwait"
)

// With [model] preflight on, the host sends one GET {base_url}/models with
// the key at start, without retries, and keeps its result by kind; a check
// on demand sees the endpoint as it is now. With it off, nothing is sent.
func TestModelPreflight(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		kind    string // "" = ok
		message string
	}{
		{"ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"data":[{"id":"test"}]}`) }, "", ""},
		{"401", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(401)
			io.WriteString(w, `{"error":{"message":"bad key"}}`)
		}, "auth", `HTTP 401: the endpoint refused the credentials: "bad key"`},
		{"429", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) }, "rate_limited", ""},
		{"503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }, "server", ""},
		{"404", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }, "request", ""},
		{"not json", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>") }, "bad_response", ""},
		{"timeout", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "timeout", "no data from the server within 1s (model.timeout_seconds)"},
		// A server that closes the connection: its own kind, not a timeout.
		{"connection closed", func(w http.ResponseWriter, r *http.Request) {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		}, "transport", ""},
		// Ollama's list without the configured model: its first step
		// would get a 404.
		{"model not listed", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"object":"list","data":[{"id":"llama3.2:latest","object":"model","created":1,"owned_by":"library"}]}`)
		}, "request", `GET /models does not list the model "test" (model.model); it lists "llama3.2:latest"`},
		{"ollama tag", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"object":"list","data":[{"id":"test:latest","object":"model","created":1,"owned_by":"library"}]}`)
		}, "", ""},
		// llama.cpp serves its one model under any name a request gives.
		{"llama.cpp", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"models":[{"name":"toy.gguf","model":"toy.gguf"}],"object":"list","data":[{"id":"toy.gguf","object":"model","created":1764680000,"owned_by":"llamacpp","meta":{"n_ctx_train":512}}]}`)
		}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			var healthy atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if r.Method != http.MethodGet || r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer sk-test" {
					t.Errorf("preflight sent %s %s (auth %q)", r.Method, r.URL.Path, r.Header.Get("Authorization"))
				}
				if healthy.Load() {
					io.WriteString(w, `{"data":[{"id":"test"}]}`)
					return
				}
				tc.handler(w, r)
			}))
			t.Cleanup(srv.Close)
			t.Setenv("TASKHOST_TEST_MODEL_KEY", "sk-test")
			cfg := testConfig(t)
			cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 1, MaxRetries: 3,
				APIKeyEnv: "TASKHOST_TEST_MODEL_KEY", Preflight: true}
			h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close(context.Background()) })

			st := waitPreflight(t, h)
			if st.OK != (tc.kind == "") || st.Kind != tc.kind || (tc.message != "" && st.Message != tc.message) || st.Provider != "openai" || st.Name != "test" {
				t.Errorf("preflight = %+v, want kind %q message %q", st, tc.kind, tc.message)
			}
			if got := hits.Load(); got != 1 {
				t.Errorf("the endpoint saw %d requests, want 1: a preflight is not retried", got)
			}
			healthy.Store(true)
			if again := h.Model.Check(context.Background()); !again.OK || again.Kind != "" || !again.Checked.After(st.Checked) {
				t.Errorf("a check on demand after the endpoint recovered: %+v", again)
			}
		})
	}

	t.Run("scripted", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Model = config.Model{Provider: config.ProviderScripted, Preflight: true}
		h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		if st := h.Model.Check(context.Background()); !st.Preflight || !st.OK || st.Checked.IsZero() || st.Provider != "scripted" {
			t.Errorf("scripted with preflight on: %+v, want ok at once", st)
		}
	})

	t.Run("off", func(t *testing.T) {
		var hits atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
		t.Cleanup(srv.Close)
		cfg := testConfig(t)
		cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 1}
		h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		if st := h.Model.Check(context.Background()); st.Preflight || !st.Checked.IsZero() || hits.Load() != 0 {
			t.Errorf("preflight off: %+v, %d requests", st, hits.Load())
		}
	})
}

// A host closed while its start-up preflight hangs stops it at once rather
// than waiting out the timeout.
func TestModelPreflightStopsWithTheHost(t *testing.T) {
	started := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(t)
	cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 600, Preflight: true}
	h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	closed := make(chan struct{})
	go func() {
		h.Close(context.Background())
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for the preflight's 600 s timeout")
	}
	if st := h.Model.Status(); !st.Checked.IsZero() || strings.Contains(st.Kind, "cancel") {
		t.Errorf("a preflight cut by the close left a result: %+v", st)
	}
}

// waitPreflight polls until the start-up preflight has a result.
func waitPreflight(t *testing.T, h *Host) model.Status {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if st := h.Model.Status(); !st.Checked.IsZero() {
			return st
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no preflight result within 20 s")
	return model.Status{}
}
