package model

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
)

// These tests answer with the bodies real servers send (testdata/servers:
// llama-server of llama.cpp, captured with ../shared/realmodel; OpenAI's
// and vLLM's documented error bodies).

func ptr[T any](v T) *T { return &v }

// newConfigured builds an openai provider for f from cfg's request options.
func newConfigured(t *testing.T, f *fakeAPI, edit func(*config.Model), opts ...Option) Provider {
	t.Helper()
	cfg := openAIConfig(f.srv.URL)
	edit(&cfg)
	rec := &sleepRecorder{}
	p, err := New(cfg, canaryEnv, append([]Option{withSleep(rec.sleep), withBackoffBase(testBackoffBase)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func requestBody(t *testing.T, f *fakeAPI, i int) map[string]any {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(f.requests()[i].body, &body); err != nil {
		t.Fatal(err)
	}
	return body
}

// The configured options are sent; a request's own options win; extra_body
// joins them.
func TestOpenAIRequestOptions(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 200, llamaText) })
	p := newConfigured(t, f, func(m *config.Model) {
		m.MaxTokens, m.Temperature, m.TopP, m.Seed, m.Stop = 256, ptr(0.2), ptr(0.9), ptr(42), []string{"</s>"}
		m.ExtraBody = `{"options":{"num_ctx":8192},"cache_prompt":true}`
	})
	if _, err := p.Complete(context.Background(), textRequest()); err != nil {
		t.Fatal(err)
	}
	req := textRequest()
	req.Options = Options{MaxTokens: 64, Temperature: ptr(0.0), Stop: []string{"END"}}
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	first, second := requestBody(t, f, 0), requestBody(t, f, 1)
	want := map[string]any{"max_tokens": 256.0, "temperature": 0.2, "top_p": 0.9, "seed": 42.0, "stop": []any{"</s>"},
		"options": map[string]any{"num_ctx": 8192.0}, "cache_prompt": true}
	for k, v := range want {
		if !reflect.DeepEqual(first[k], v) {
			t.Errorf("request %s = %v, want %v", k, first[k], v)
		}
	}
	for k, v := range map[string]any{"max_tokens": 64.0, "temperature": 0.0, "top_p": 0.9, "stop": []any{"END"}} {
		if !reflect.DeepEqual(second[k], v) {
			t.Errorf("overridden request %s = %v, want %v", k, second[k], v)
		}
	}
	if _, ok := first["stream"]; ok {
		t.Errorf("stream sent though not configured: %v", first["stream"])
	}
}

// A tool schema is sent compact: the same schema, fewer prompt tokens.
func TestOpenAICompactSchemas(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 200, llamaText) })
	p, _ := newTestOpenAI(t, f)
	req := textRequest()
	req.Tools = []ToolSpec{{Name: "workspace.read", Parameters: "{\n  \"type\": \"object\",\n  \"properties\": {\n    \"path\": {\"type\": \"string\"}\n  }\n}"}}
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if body := string(f.requests()[0].body); !strings.Contains(body, `"parameters":{"type":"object","properties":{"path":{"type":"string"}}}`) {
		t.Errorf("schema not compacted: %s", body)
	}
}

// What llama-server answers, and what each becomes.
func TestOpenAIRealServerBodies(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		kind     ErrorKind
		requests int
		msg      string
	}{
		{"llama.cpp unparsable tool call", 500, llamaBadReplyBody, KindBadReply, 1, "does not match the expected peg-native format"},
		{"llama.cpp context", 400, llamaContextBody, KindContextExceeded, 1, "request (5318 tokens) exceeds the available context size (2048 tokens)"},
		{"OpenAI context", 400, openAIContextBody, KindContextExceeded, 1, "maximum context length is 8192 tokens"},
		{"vLLM context", 400, vllmContextBody, KindContextExceeded, 1, "you requested 5000 tokens"},
		{"vLLM context, older body", 400, vllmOldContextBody, KindContextExceeded, 1, "maximum context length is 2048 tokens"},
		{"llama.cpp other 500 is retried", 500, `{"error":{"code":500,"message":"slot unavailable","type":"server_error"}}`, KindServer, 3, "slot unavailable"},
		{"Ollama model not found", 404, `{"error":{"message":"model \"llama3\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`, KindRequest, 1, "try pulling it first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, tt.status, tt.body) })
			p, _ := newTestOpenAI(t, f)
			_, err := p.Complete(context.Background(), textRequest())
			merr := wantKind(t, err, tt.kind)
			if !strings.Contains(merr.Message, tt.msg) || merr.Status != tt.status {
				t.Errorf("error %v (status %d): want %q and status %d", err, merr.Status, tt.msg, tt.status)
			}
			if n := len(f.requests()); n != tt.requests {
				t.Errorf("%d requests, want %d", n, tt.requests)
			}
			if Unavailable(err) != (tt.kind == KindServer) {
				t.Errorf("Unavailable(%v) = %v", err, Unavailable(err))
			}
		})
	}
}

// The finish reason and the usage of a reply are decoded.
func TestOpenAIFinishAndUsage(t *testing.T) {
	for _, tt := range []struct {
		name, body, finish string
		prompt, completion int64
	}{
		{"llama.cpp stop", llamaText, FinishStop, 112, 7},
		{"llama.cpp length", llamaLength, FinishLength, 40, 16},
		{"no usage", `{"choices":[{"message":{"content":"x"}}]}`, "", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 200, tt.body) })
			p, _ := newTestOpenAI(t, f)
			resp, err := p.Complete(context.Background(), textRequest())
			if err != nil {
				t.Fatal(err)
			}
			if resp.FinishReason != tt.finish || resp.Usage.PromptTokens != tt.prompt || resp.Usage.CompletionTokens != tt.completion {
				t.Errorf("finish %q usage %+v, want %q %d+%d", resp.FinishReason, resp.Usage, tt.finish, tt.prompt, tt.completion)
			}
			if resp.Usage.Duration <= 0 {
				t.Errorf("duration %v not measured", resp.Usage.Duration)
			}
		})
	}
}

// sseHandler streams events, one write and flush each; hold, when set, is
// waited on after the events (the stream then stays open).
func sseHandler(events []string, hold <-chan struct{}) func(w http.ResponseWriter, r *http.Request, n int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, e := range events {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
	}
}

// stepClock is a clock that moves by step on every reading.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

func streamed(m *config.Model) { m.Stream = true }

// A streamed reply is assembled as a whole one would be, its usage kept,
// and progress is reported at most once a second.
func TestOpenAIStreamText(t *testing.T) {
	f := newFakeAPI(t, sseHandler(llamaStreamText, nil))
	clock := &stepClock{now: time.Unix(1e9, 0), step: 400 * time.Millisecond}
	p := newConfigured(t, f, streamed, withClock(clock.read))
	var reports []Progress
	req := textRequest()
	req.Progress = func(pr Progress) { reports = append(reports, pr) }
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "TASK_COMPLETE: done" || resp.FinishReason != FinishStop || resp.Usage.PromptTokens != 112 || resp.Usage.CompletionTokens != 5 {
		t.Fatalf("reply %+v", resp)
	}
	body := requestBody(t, f, 0)
	if body["stream"] != true || !reflect.DeepEqual(body["stream_options"], map[string]any{"include_usage": true}) {
		t.Errorf("stream options sent: %v %v", body["stream"], body["stream_options"])
	}
	// 6 chunks at 0.4 s each: 2.4 s, so two reports, a second apart.
	if len(reports) != 2 || reports[1].Elapsed-reports[0].Elapsed < time.Second {
		t.Errorf("progress reports %+v: want two, at least a second apart", reports)
	}
}

// Streamed tool calls arrive in pieces by index and are put together.
func TestOpenAIStreamToolCalls(t *testing.T) {
	f := newFakeAPI(t, sseHandler(llamaStreamToolCall, nil))
	p := newConfigured(t, f, streamed)
	req := textRequest()
	req.Tools = []ToolSpec{{Name: "workspace.write"}}
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []ToolCall{{ID: "Vx3", Name: "workspace.write", Arguments: `{"path":"notes.txt","content":"hi"}`}}
	if !reflect.DeepEqual(resp.Message.ToolCalls, want) || resp.FinishReason != FinishToolCalls {
		t.Fatalf("calls %+v finish %q, want %+v", resp.Message.ToolCalls, resp.FinishReason, want)
	}
}

func TestOpenAIStreamFailures(t *testing.T) {
	t.Run("error event mid-stream", func(t *testing.T) {
		f := newFakeAPI(t, sseHandler([]string{llamaStreamText[0], "data: " + llamaBadReplyBody + "\n\n"}, nil))
		_, err := newConfigured(t, f, streamed).Complete(context.Background(), textRequest())
		wantKind(t, err, KindBadReply)
		if n := len(f.requests()); n != 1 {
			t.Errorf("%d requests: a bad reply is not retried", n)
		}
	})
	t.Run("server gone mid-stream", func(t *testing.T) {
		f := newFakeAPI(t, sseHandler(llamaStreamText[:2], nil))
		_, err := newConfigured(t, f, streamed).Complete(context.Background(), textRequest())
		merr := wantKind(t, err, KindTransport)
		if !strings.Contains(merr.Message, "closed before the reply ended") || !Unavailable(err) {
			t.Errorf("error %v", err)
		}
	})
	t.Run("idle between chunks", func(t *testing.T) {
		hold := make(chan struct{})
		t.Cleanup(func() { close(hold) })
		f := newFakeAPI(t, sseHandler(llamaStreamText[:2], hold))
		_, err := newConfigured(t, f, streamed, withAttemptTimeout(100*time.Millisecond)).Complete(context.Background(), textRequest())
		merr := wantKind(t, err, KindTimeout)
		if !strings.Contains(merr.Message, "no data from the server within 100ms") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("steady but too long", func(t *testing.T) {
		// A keep-alive every 10 ms keeps the idle timer from firing;
		// only the bound on the whole call ends it.
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Content-Type", "text/event-stream")
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					io.WriteString(w, ":\n\n")
					w.(http.Flusher).Flush()
				}
			}
		})
		_, err := newConfigured(t, f, streamed, withAttemptTimeout(2*time.Second), withCallTimeout(300*time.Millisecond)).Complete(context.Background(), textRequest())
		merr := wantKind(t, err, KindTimeout)
		if !strings.Contains(merr.Message, "longer than 300ms (model.max_call_seconds)") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("event too large", func(t *testing.T) {
		f := newFakeAPI(t, sseHandler([]string{"data: {\"x\":\"" + strings.Repeat("a", MaxResponseBodyBytes) + "\"}\n\n"}, nil))
		_, err := newConfigured(t, f, streamed).Complete(context.Background(), textRequest())
		wantKind(t, err, KindBadResponse)
	})
	t.Run("too many tool calls", func(t *testing.T) {
		f := newFakeAPI(t, sseHandler([]string{`data: {"choices":[{"delta":{"tool_calls":[{"index":17,"id":"a","function":{"name":"t","arguments":""}}]}}]}` + "\n\n"}, nil))
		_, err := newConfigured(t, f, streamed).Complete(context.Background(), textRequest())
		wantKind(t, err, KindBadReply)
	})
	t.Run("a server that does not stream", func(t *testing.T) {
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 200, llamaText) })
		resp, err := newConfigured(t, f, streamed).Complete(context.Background(), textRequest())
		if err != nil || resp.Message.Content != "TASK_COMPLETE: done" {
			t.Fatalf("%+v, %v", resp, err)
		}
	})
}

// A cancel mid-stream closes the request's connection at once: that is what
// makes llama.cpp stop generating.
func TestOpenAIStreamCancel(t *testing.T) {
	closed := make(chan struct{})
	started := make(chan struct{})
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, llamaStreamText[0])
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done() // the connection closed
		close(closed)
	})
	cancelMidFlight(t, newConfigured(t, f, streamed), started, closed)
}

// Preflight tells a model the endpoint does not list.
func TestOpenAIPreflightModelListed(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		ok         bool
	}{
		{"listed", `{"object":"list","data":[{"id":"test-model","object":"model","owned_by":"vllm"}]}`, true},
		{"ollama tag", `{"object":"list","data":[{"id":"test-model:latest","object":"model","owned_by":"library"}]}`, true},
		{"llama.cpp any name", llamaModels, true},
		{"not listed", `{"object":"list","data":[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"},{"id":"e"},{"id":"f"}]}`, false},
		{"empty", `{"object":"list","data":[]}`, false},
		{"no list at all", `{}`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 200, tt.body) })
			p, _ := newTestOpenAI(t, f)
			err := p.(Preflighter).Preflight(context.Background())
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			merr := wantKind(t, err, KindRequest)
			if !strings.Contains(merr.Message, `"test-model"`) || (tt.name == "not listed" && !strings.Contains(merr.Message, `"e" and 1 more`)) {
				t.Errorf("message %q", merr.Message)
			}
		})
	}
}
