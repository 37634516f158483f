package legacy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
)

const (
	// maxToolResultBytes bounds a tool's output fed back to the model: the
	// host refuses a model request whose messages are too large, and one
	// verbose tool should not end the task that way.
	maxToolResultBytes = 32 << 10
	// maxApprovalSummaries bounds how many interrupted effects one approval
	// prompt names (the host also bounds the prompt).
	maxApprovalSummaries = 5
	// maxToolNameBytes bounds a tool name quoted back to the model.
	maxToolNameBytes = 64
)

// turnStats are the counts a step logs.
type turnStats struct {
	rounds     int // model calls
	toolCalls  int // tool calls the model asked for
	cut        int // messages cut to fit the model's context
	badReplies int // replies the model was told were not usable
	cutReply   bool
}

// turn is one agent turn: model calls and the tool calls they ask for.
type turn struct {
	host      sdk.Host
	taskID    string
	attempt   int64
	maxRounds int
	tools     []sdk.ToolSpec
	stats     *turnStats
	fit       *fitter
}

// maxFeedbackBytes bounds the host's account of a bad reply told to the
// model.
const maxFeedbackBytes = 400

// finalReply is the model's reply without tool calls; cut says the model
// stopped at the output limit (finish_reason "length"), so it may be
// incomplete.
type finalReply struct {
	text string
	cut  bool
}

// run calls the model with history until it replies without tool calls, and
// returns that reply.
func (t *turn) run(ctx context.Context, history []sdk.Message) (finalReply, error) {
	refusedLength := false
	for t.stats.rounds < t.maxRounds {
		// Checked between calls too: a host call that finished just as the
		// step was cancelled must not start another.
		if err := ctx.Err(); err != nil {
			return finalReply{}, fmt.Errorf("legacy: %w", err)
		}
		t.stats.rounds++
		sent, cut := t.fit.fit(history, t.tools)
		t.stats.cut = max(t.stats.cut, cut)
		resp, err := t.host.CallModel(ctx, sdk.ModelRequest{Messages: sent, Tools: t.tools})
		if merr, ok := errors.AsType[*sdk.ModelError](err); ok && ctx.Err() == nil {
			switch {
			case merr.Kind == sdk.ModelKindBadReply && t.stats.badReplies == 0:
				// Like a misspelt tool name: the model may do better
				// when told, once. The failed call still counts a round.
				t.stats.badReplies++
				history = append(history, sdk.Message{Role: "user", Content: "error: your last reply could not be used (" +
					truncateBytes(merr.Message, maxFeedbackBytes) + "). Reply again: call one of the offered tools with JSON arguments, or answer in plain text."})
				continue
			case merr.Kind == sdk.ModelKindBadReply:
				return finalReply{}, failf(reasonModelBadReply, "legacy: the model's reply could not be used twice in one step: %s", merr.Message)
			case merr.Kind == sdk.ModelKindContextExceeded && t.fit.budget > 0 && !refusedLength:
				// The server counts more tokens than the rate learnt:
				// cut harder and try once more.
				refusedLength = true
				t.fit.refused()
				continue
			case merr.Kind == sdk.ModelKindContextExceeded:
				return finalReply{}, failf(reasonModelContextExceeded, "legacy: the request does not fit the model's context even with old tool results cut; set [model] context_tokens to the server's context size (llama.cpp -c, Ollama num_ctx) or give the server a larger one, then resume: %s", merr.Message)
			}
		}
		if err != nil {
			return finalReply{}, hostError(ctx, "model call", err)
		}
		t.fit.learn(requestBytes(sent, t.tools), resp.Usage)
		msg := resp.Message
		if len(msg.ToolCalls) == 0 {
			return finalReply{text: msg.Content, cut: resp.FinishReason == sdk.FinishLength}, nil
		}
		if t.stats.rounds == t.maxRounds {
			// No model call would read these tools' results: running them
			// would spend effects (and budget) for nothing.
			break
		}
		msg.Role = "assistant"
		msg.ToolCalls = t.withIDs(msg.ToolCalls)
		history = append(history, msg)
		for _, call := range msg.ToolCalls {
			content, err := t.callTool(ctx, call)
			if err != nil {
				return finalReply{}, err
			}
			history = append(history, sdk.Message{Role: "tool", Content: content, ToolCallID: call.ID})
		}
	}
	return finalReply{}, failf(reasonExecutorFailed, "legacy: the turn used all %d model rounds (legacy.max_rounds) and the model still asked for tools", t.maxRounds)
}

// withIDs returns calls with an ID on each: a tool result is tied to its
// call by ID, and a model that sent none would otherwise get results it
// cannot match.
func (t *turn) withIDs(calls []sdk.ToolCall) []sdk.ToolCall {
	out := make([]sdk.ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("legacy_call_%d", t.stats.toolCalls+i+1)
		}
		out[i] = c
	}
	return out
}

// callTool runs one tool call through the host and returns what the model
// reads of it.
func (t *turn) callTool(ctx context.Context, call sdk.ToolCall) (string, error) {
	t.stats.toolCalls++
	// Mistakes of the model that the host would refuse are told to the
	// model instead, which can correct them; failing the task over a
	// misspelt tool name would waste every step done so far.
	if !t.offers(call.Name) {
		return fmt.Sprintf("error: there is no tool %q in this task", truncateBytes(call.Name, maxToolNameBytes)), nil
	}
	if call.Arguments != "" && !json.Valid([]byte(call.Arguments)) {
		return "error: the tool arguments are not valid JSON", nil
	}
	res, err := t.host.CallTool(ctx, sdk.ToolRequest{
		Name:      call.Name,
		Arguments: call.Arguments,
		// Not the call's ID: the model picks those and repeats them across
		// turns ("call_1" in every step), so they would make distinct
		// effects look like one. The index counts calls within the attempt.
		IdempotencyKey: fmt.Sprintf("legacy/%s/%d/%d", t.taskID, t.attempt, t.stats.toolCalls),
	})
	if err != nil {
		return "", hostError(ctx, "tool call", err)
	}
	return res.ForModel(maxToolResultBytes), nil
}

func (t *turn) offers(name string) bool {
	for _, s := range t.tools {
		if s.Name == name {
			return true
		}
	}
	return false
}

// offeredTools lists the tools to offer to the model. A host without a tool
// service offers none.
func offeredTools(ctx context.Context, host sdk.Host) ([]sdk.ToolSpec, error) {
	tools, err := host.Tools(ctx)
	if errors.Is(err, sdk.ErrUnimplemented) {
		return nil, nil
	}
	if err != nil {
		return nil, hostError(ctx, "tool listing", err)
	}
	return tools, nil
}

// confirmRetry asks for an approval before a step re-runs after an attempt
// that died with tool effects in flight (see the package comment). Any
// error is the host's word on the task and is returned as is.
func confirmRetry(ctx context.Context, host sdk.Host, indeterminate []sdk.Effect) error {
	var what []string
	for _, e := range indeterminate {
		if e.Kind != "tool" {
			continue
		}
		if len(what) == maxApprovalSummaries {
			what = append(what, "and more")
			break
		}
		s := strings.TrimSpace(e.Summary)
		if s == "" {
			s = "tool call"
		}
		what = append(what, s)
	}
	if len(what) == 0 {
		return nil
	}
	d, err := host.RequestApproval(ctx, fmt.Sprintf("retry after an interrupted %s?", strings.Join(what, ", ")))
	if err != nil {
		return fmt.Errorf("legacy: approval to retry: %w", err)
	}
	if d != sdk.Approved {
		// The host fails the task on a rejection itself; should one reach
		// the executor anyway, it must not read as a go-ahead.
		return failf(reasonApprovalRejected, "legacy: the retry after an interrupted tool call was not approved")
	}
	return nil
}

// hostError decides what a failed host call means for the step.
func hostError(ctx context.Context, call string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("legacy: %s: %w", call, ctxErr)
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The host ended the call on its side: the step is being cancelled
		// and ctx follows.
		return fmt.Errorf("legacy: %s: %w", call, err)
	case errors.Is(err, sdk.ErrBudgetExhausted):
		// The host fails the task with the budget's own reason; this says
		// which call was refused.
		return failf(reasonExecutorFailed, "legacy: %s refused: %v", call, err)
	}
	return failf(reasonExecutorFailed, "legacy: %s failed: %v", call, err)
}

// truncateBytes cuts s to at most n bytes, never inside a rune.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
