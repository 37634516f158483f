package host

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// A cancelled task's model call is aborted at once, whatever the executor:
// the server sees the request's connection close, which is what stops a
// generation on llama.cpp (it generates until then, or until the context is
// full). The server here holds every request open and reports when its
// connection closes.
func TestCancelAbortsModelRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		executor string
		spec     func(t *testing.T) []byte
		files    func(t *testing.T) []File
		mutate   func(*config.Config)
	}{
		{name: "testexec", executor: "testexec", spec: func(t *testing.T) []byte { return spec(t, "g", map[string]any{"call_model": true}) }},
		{name: "legacy", executor: "legacy", spec: func(*testing.T) []byte { return []byte(`{"goal":"write notes"}`) }},
		{name: "machinespirit rlm", executor: "machinespirit", spec: rlmSpec,
			files: func(t *testing.T) []File { return []File{rlmContext(t)} }, mutate: machineSpiritOn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			closed := make(chan time.Time, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				select {
				case arrived <- struct{}{}:
				default:
				}
				<-r.Context().Done() // the client closed the connection
				select {
				case closed <- time.Now():
				default:
				}
			}))
			t.Cleanup(srv.Close)
			cfg := testConfig(t)
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test",
				TimeoutSeconds: 600, MaxCallSeconds: 600, MaxRetries: 0, MaxTokens: 1024}
			h := openHostWith(t, Options{DataDir: testwait.ShortTempDir(t), Config: cfg})
			var files []File
			if tc.files != nil {
				files = tc.files(t)
			}
			task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: tc.executor, Spec: tc.spec(t), Files: files})
			if err != nil {
				if tc.executor == "machinespirit" {
					t.Skipf("machinespirit unavailable here: %v", err)
				}
				t.Fatal(err)
			}
			select {
			case <-arrived:
			case <-time.After(30 * time.Second): // a failure bound
				t.Fatal("the model request never arrived")
			}
			began := time.Now()
			if _, err := h.Runner.Cancel(context.Background(), alice, task.ID); err != nil {
				t.Fatal(err)
			}
			select {
			case at := <-closed:
				t.Logf("%s: the server saw the connection close %v after the cancel", tc.name, at.Sub(began))
			case <-time.After(10 * time.Second): // a failure bound, not synchronisation
				t.Fatal("the model request was still open 10 s after the cancel")
			}
			if got := waitEnd(t, h, alice, task.ID); got.Status != store.StatusCancelled {
				t.Fatalf("task %s (%s)", got.Status, got.Reason)
			}
		})
	}
}
