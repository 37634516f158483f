package model

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
)

// Bodies captured from the real llama-server (testdata/llamacpp; see
// servers_test.go), replayed byte for byte.

func capture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "llamacpp", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// serveCapture answers every request with the captured file, as JSON or as
// an event stream, split where the server flushed (one event a write).
func serveCapture(t *testing.T, name string) *fakeAPI {
	body := capture(t, name)
	return newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if !strings.HasSuffix(name, ".sse") {
			writeJSON(w, 200, body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, ev := range strings.SplitAfter(body, "\n\n") {
			w.Write([]byte(ev))
			w.(http.Flusher).Flush()
		}
	})
}

var toyToolCalls = []ToolCall{
	{ID: "zM2ulBIjSqtw2ufV9ax1XzDJf6JfrD6f", Name: "shell.run", Arguments: `{"command": "cateo " }`},
	{ID: "lFPeEeusfPqxJsI0nSDVVnvZTjQSMcgX", Name: "shell.run", Arguments: `{"command": "cathels.txtelll_ruca{" }`},
}

func toolRequest() Request {
	req := textRequest()
	req.Tools = []ToolSpec{{Name: "shell.run"}, {Name: "workspace.write"}}
	return req
}

func TestLlamaCppCaptures(t *testing.T) {
	t.Run("tool calls", func(t *testing.T) {
		p, _ := newTestOpenAI(t, serveCapture(t, "tool-calls.json"))
		resp, err := p.Complete(context.Background(), toolRequest())
		if err != nil {
			t.Fatal(err)
		}
		want := []ToolCall{
			{ID: "D8uXxv0beXg93zOc4i3nEHmm1yFnj8Cg", Name: "shell.run", Arguments: `{"command": "cateo " }`},
			{ID: "FMLuN1iPfPERB491J43ddlulNUXS4nM1", Name: "shell.run", Arguments: `{"command": "cathels.txtelll_ruca{" }`},
		}
		if !reflect.DeepEqual(resp.Message.ToolCalls, want) || resp.FinishReason != FinishToolCalls ||
			resp.Usage.PromptTokens != 517 || resp.Usage.CompletionTokens != 183 {
			t.Fatalf("reply %+v", resp)
		}
	})
	t.Run("streamed tool calls", func(t *testing.T) {
		p := newConfigured(t, serveCapture(t, "stream-tool-call.sse"), streamed)
		resp, err := p.Complete(context.Background(), toolRequest())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(resp.Message.ToolCalls, toyToolCalls) || resp.Message.Content != "" || resp.FinishReason != FinishToolCalls ||
			resp.Usage.PromptTokens != 517 || resp.Usage.CompletionTokens != 183 {
			t.Fatalf("reply %+v", resp)
		}
	})
	t.Run("streamed reply cut at max_tokens", func(t *testing.T) {
		// Cut inside a tool call the server had not parsed yet: no
		// content, no calls, finish "length", usage in a chunk of its own.
		p := newConfigured(t, serveCapture(t, "stream-length.sse"), streamed)
		resp, err := p.Complete(context.Background(), toolRequest())
		if err != nil {
			t.Fatal(err)
		}
		if resp.FinishReason != FinishLength || resp.Message.Content != "" || len(resp.Message.ToolCalls) != 0 || resp.Usage.CompletionTokens != 24 {
			t.Fatalf("reply %+v", resp)
		}
	})
	t.Run("models lists the file, any name serves", func(t *testing.T) {
		p := newConfigured(t, serveCapture(t, "models.json"), func(m *config.Model) { m.Name = "toy" })
		if err := p.(Preflighter).Preflight(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
