package host

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/store"
)

// A model call's max_tokens is lowered to what the task's token budget has
// left once its prompt is counted, so a reply is cut at the budget rather
// than charged past it: three calls of 30+10 reported tokens each, a 4-token
// prompt estimate, a budget of 200 and the configured 1024 send 196, 156
// and 116. Before, every call asked for 1024.
func TestModelCallMaxTokensFitsTheBudget(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sent []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			MaxTokens int `json:"max_tokens"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("request body: %v", err)
		}
		mu.Lock()
		sent = append(sent, body.MaxTokens)
		mu.Unlock()
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":30,"completion_tokens":10}}`)
	}))
	t.Cleanup(srv.Close)
	h := openHost(t, "", func(c *config.Config) {
		c.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test",
			TimeoutSeconds: 60, MaxCallSeconds: 60, MaxRetries: 0, MaxTokens: 1024}
	})
	for _, tc := range []struct {
		name   string
		tokens int64
		want   []int
	}{
		{"a budget below max_tokens", 200, []int{196, 156, 116}},
		{"a budget above it", 1 << 20, []int{1024, 1024, 1024}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			sent = nil
			mu.Unlock()
			task := create(t, h, alice, map[string]any{"steps": 3, "call_model": true}, Limits{Steps: 5, ModelTokens: tc.tokens})
			got := waitEnd(t, h, alice, task.ID)
			wantStatus(t, got, store.StatusCompleted, store.ReasonNone)
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(sent, tc.want) {
				t.Errorf("max_tokens sent %v, want %v", sent, tc.want)
			}
		})
	}
}
