package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// The shipped legacy executor, the host and the openai provider against an
// endpoint that refuses any function name outside OpenAI's documented
// pattern, as a real one is expected to: the tools go out as workspace_write
// and the like, the model's call by that name runs the host's
// workspace.write, and the task completes with the file written.
func TestOpenAIToolNamesEndToEnd(t *testing.T) {
	t.Parallel()
	pattern := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	var offered, refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
			Messages []struct {
				Role      string `json:"role"`
				ToolCalls []struct {
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
		}
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &body); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		answered := false
		var names []string
		for _, tl := range body.Tools {
			names = append(names, tl.Function.Name)
		}
		for _, m := range body.Messages {
			answered = answered || m.Role == "tool"
			for _, tc := range m.ToolCalls {
				names = append(names, tc.Function.Name)
			}
		}
		for _, n := range names {
			if !pattern.MatchString(n) {
				refused.Add(1)
				http.Error(w, fmt.Sprintf(`{"error":{"message":"function name %q does not match the pattern"}}`, n), http.StatusBadRequest)
				return
			}
			if n == "workspace_write" {
				offered.Add(1)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if answered {
			io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"TASK_COMPLETE: notes written"}}]}`)
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
			{"id":"c1","type":"function","function":{"name":"workspace_write","arguments":"{\"path\":\"notes.md\",\"content\":\"hello\"}"}}]}}]}`)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(t)
	cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 10}
	h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(t), Config: cfg, ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })

	task := waitEnd(t, h, alice, legacyTask(t, h, "write notes").ID)
	wantStatus(t, task, store.StatusCompleted, "")
	if n := refused.Load(); n != 0 {
		t.Errorf("%d requests carried a function name outside the pattern", n)
	}
	if offered.Load() == 0 {
		t.Error("workspace.write was never offered as workspace_write")
	}
	got, err := os.ReadFile(filepath.Join(h.Runner.workspace(task.ID), "notes.md"))
	if err != nil || string(got) != "hello" {
		t.Errorf("notes.md = %q, %v; want the model's call to have run workspace.write", got, err)
	}
}
