package legacy

import (
	"context"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// The replies below are what the host hands on from real servers: the
// message of llama.cpp's HTTP 500 for a tool call it could not parse, and
// its HTTP 400 for a request longer than its context.
const (
	llamaBadReply = `HTTP 500: the server could not parse the model's reply: "The model produced output that does not match the expected peg-native format"`
	llamaTooLong  = `HTTP 400: the request does not fit the model's context: "request (5318 tokens) exceeds the available context size (2048 tokens), try increasing it"`
)

// scriptedModel answers the n-th model call (0-based) with replies[n].
func scriptedModel(replies ...func(sdk.ModelRequest) (sdk.ModelResponse, error)) func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
	n := 0
	return func(_ context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
		i := min(n, len(replies)-1)
		n++
		return replies[i](req)
	}
}

func reply(m sdk.Message) func(sdk.ModelRequest) (sdk.ModelResponse, error) {
	return func(sdk.ModelRequest) (sdk.ModelResponse, error) { return sdk.ModelResponse{Message: m}, nil }
}

func modelFails(kind sdk.ModelErrorKind, msg string) func(sdk.ModelRequest) (sdk.ModelResponse, error) {
	return func(sdk.ModelRequest) (sdk.ModelResponse, error) {
		return sdk.ModelResponse{}, &sdk.ModelError{Kind: kind, Message: msg}
	}
}

var offered = []sdk.ToolSpec{{Name: "workspace.read", Parameters: `{"type":"object"}`}}

func offeredHost(model func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error)) *sdktest.Host {
	return legacyHost(&sdktest.Host{CallModelF: model,
		ToolsF: func(context.Context) ([]sdk.ToolSpec, error) { return offered, nil }})
}

// A reply the server could not parse is told to the model once; the model
// then answers and the step goes on.
func TestBadReplyFedBackOnce(t *testing.T) {
	host := offeredHost(scriptedModel(modelFails(sdk.ModelKindBadReply, llamaBadReply), reply(text("TASK_COMPLETE: done"))))
	res := mustStep(t, host, firstStep("g"))
	wantOutcome(t, res, sdk.OutcomeComplete, "")
	_, models, _, _ := snapshot(host)
	if len(models) != 2 {
		t.Fatalf("%d model calls, want 2", len(models))
	}
	last := models[1].Messages[len(models[1].Messages)-1]
	if last.Role != "user" || !strings.Contains(last.Content, "could not be used") || !strings.Contains(last.Content, "peg-native format") {
		t.Fatalf("the second call ends with %+v, want the bad reply told to the model", last)
	}
}

// A second bad reply in the step fails it with the typed reason, not as an
// outage and not as executor_failed.
func TestBadReplyTwiceFailsTyped(t *testing.T) {
	host := offeredHost(scriptedModel(modelFails(sdk.ModelKindBadReply, llamaBadReply)))
	res := mustStep(t, host, firstStep("g"))
	wantOutcome(t, res, sdk.OutcomeFail, "model_bad_reply")
	if !strings.Contains(res.Message, "peg-native format") {
		t.Errorf("message %q does not say what the server said", res.Message)
	}
	if _, models, _, _ := snapshot(host); len(models) != 2 {
		t.Errorf("%d model calls, want 2 (one feedback)", len(models))
	}
}

// A reply cut at max_tokens never completes the task, even when it begins
// with the sentinel, and its summary says it was cut.
func TestLengthCutReplyIsFlagged(t *testing.T) {
	host := legacyHost(&sdktest.Host{CallModelF: func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
		return sdk.ModelResponse{Message: text("TASK_COMPLETE: the report has three sec"), FinishReason: sdk.FinishLength}, nil
	}})
	res := mustStep(t, host, firstStep("g"))
	wantOutcome(t, res, sdk.OutcomeContinue, "")
	if !strings.HasPrefix(res.Summary, cutMark) || !strings.Contains(res.Summary, "three sec") {
		t.Fatalf("summary %q: want it flagged as cut", res.Summary)
	}
}

// With a prompt budget, the oldest tool results are cut first once the
// history would not fit; the system message and the user prompt stay
// whole, and the newest result is kept while cutting the older suffices.
func TestHistoryCutToFitContext(t *testing.T) {
	big := strings.Repeat("r", 6000)
	read := sdk.ToolCall{ID: "c1", Name: "workspace.read", Arguments: `{"path":"a"}`}
	calls := 0
	host := offeredHost(func(_ context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
		calls++
		// The server reports 1 token per 2 bytes of the request.
		usage := sdk.ModelUsage{PromptTokens: int64(requestBytes(req.Messages, req.Tools) / 2)}
		if calls < 3 {
			r := read
			r.ID = []string{"", "c1", "c2"}[calls]
			return sdk.ModelResponse{Message: callTools(r), Usage: usage}, nil
		}
		return sdk.ModelResponse{Message: text("TASK_COMPLETE: read twice"), Usage: usage}, nil
	})
	host.CallToolF = func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
		return sdk.ToolResponse{Result: big}, nil
	}
	req := firstStep("read the file twice")
	req.ModelPromptTokens = 4000 // 8000 bytes at 2 bytes a token, less the margin: one big result fits, two do not
	res := mustStep(t, host, req)
	wantOutcome(t, res, sdk.OutcomeComplete, "")
	_, models, _, _ := snapshot(host)
	if len(models) != 3 {
		t.Fatalf("%d model calls, want 3", len(models))
	}
	second, third := models[1].Messages, models[2].Messages
	if got := second[len(second)-1].Content; got != big {
		t.Errorf("the second call's one result was cut (%d bytes) though it fits", len(got))
	}
	var results []string
	for _, m := range third {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	if len(results) != 2 || !strings.Contains(results[0], "cut to fit the model's context") || len(results[0]) > keptResultBytes+100 || results[1] != big {
		t.Fatalf("third call's results: want the older cut and the newer whole, got %d results of %v bytes", len(results), lens(results))
	}
	if third[0].Content != second[0].Content || third[1].Content != second[1].Content {
		t.Error("the system message or the user prompt changed: they must stay whole")
	}
	if n := requestBytes(third, offered); float64(n) > 4000*2*fitMargin {
		t.Errorf("the cut request is %d bytes, over the budget of %v", n, 4000*2*fitMargin)
	}
}

func lens(ss []string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = len(s)
	}
	return out
}

// Without a budget nothing is cut, however long the history.
func TestNoBudgetNoCut(t *testing.T) {
	f := newFitter(0)
	h := []sdk.Message{{Role: "system", Content: "s"}, {Role: "tool", Content: strings.Repeat("x", 1<<20)}}
	if got, n := f.fit(h, nil); n != 0 || len(got[1].Content) != 1<<20 {
		t.Fatalf("cut %d messages without a budget", n)
	}
}

// A context refusal makes the turn cut harder and ask once more; a second
// refusal fails the step typed, naming the setting to fix.
func TestContextRefusal(t *testing.T) {
	t.Run("retried cut harder", func(t *testing.T) {
		var sizes []int
		host := offeredHost(func(_ context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
			sizes = append(sizes, requestBytes(req.Messages, req.Tools))
			switch len(sizes) {
			case 1:
				return sdk.ModelResponse{Message: callTools(sdk.ToolCall{ID: "c1", Name: "workspace.read", Arguments: `{}`}),
					Usage: sdk.ModelUsage{PromptTokens: int64(sizes[0] / 4)}}, nil
			case 2:
				return sdk.ModelResponse{}, &sdk.ModelError{Kind: sdk.ModelKindContextExceeded, Message: llamaTooLong}
			}
			return sdk.ModelResponse{Message: text("TASK_COMPLETE: ok")}, nil
		})
		host.CallToolF = func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
			return sdk.ToolResponse{Result: strings.Repeat("r", 3000)}, nil
		}
		req := firstStep("g")
		req.ModelPromptTokens = 1000
		res := mustStep(t, host, req)
		wantOutcome(t, res, sdk.OutcomeComplete, "")
		if len(sizes) != 3 || sizes[2] >= sizes[1] {
			t.Fatalf("request sizes %v: want the retry after the refusal to be shorter", sizes)
		}
	})
	t.Run("twice fails typed", func(t *testing.T) {
		host := offeredHost(scriptedModel(modelFails(sdk.ModelKindContextExceeded, llamaTooLong)))
		req := firstStep("g")
		req.ModelPromptTokens = 1000
		res := mustStep(t, host, req)
		wantOutcome(t, res, sdk.OutcomeFail, "model_context_exceeded")
		if !strings.Contains(res.Message, "context_tokens") || !strings.Contains(res.Message, "5318 tokens") {
			t.Errorf("message %q: want the setting and the server's words", res.Message)
		}
	})
	t.Run("no budget: fails at once", func(t *testing.T) {
		host := offeredHost(scriptedModel(modelFails(sdk.ModelKindContextExceeded, llamaTooLong)))
		res := mustStep(t, host, firstStep("g"))
		wantOutcome(t, res, sdk.OutcomeFail, "model_context_exceeded")
		if _, models, _, _ := snapshot(host); len(models) != 1 {
			t.Errorf("%d model calls, want 1: with nothing known to cut, a retry is the same request", len(models))
		}
	})
}
