package host

import (
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/store"
)

// bytesPerToken is the token estimate's ratio, used when a provider
// reports no usage and to size a prompt before it is sent: about right
// for English prose with OpenAI's and Llama's tokenizers, an undercount
// for code and for most other scripts (docs/reasons.md says so).
const bytesPerToken = 4

// estimateTokens is n bytes of text in tokens, rounded up.
func estimateTokens(n int) int64 { return (int64(n) + bytesPerToken - 1) / bytesPerToken }

// promptBytes are the bytes of a model request a prompt's estimate counts:
// every message's content and tool calls, and the offered tools' specs.
func promptBytes(req model.Request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content)
		for _, tc := range m.ToolCalls {
			n += len(tc.Name) + len(tc.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return n
}

// replyBytes are a model reply's output bytes: its content and tool calls,
// what the executor is handed.
func replyBytes(m model.Message) int {
	n := len(m.Content)
	for _, tc := range m.ToolCalls {
		n += len(tc.Name) + len(tc.Arguments)
	}
	return n
}

// modelCharge is what an answered model call costs: the tokens the
// provider reported, or when it reported none the estimate of its prompt
// (promptTokens) and of its reply, marked estimated; and the reply's bytes.
func modelCharge(promptTokens int64, resp model.Response) store.Charge {
	u := resp.Usage
	c := store.Charge{Tokens: u.PromptTokens + u.CompletionTokens, OutputBytes: int64(replyBytes(resp.Message)),
		Usage: store.ModelUsage{Calls: 1, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, Millis: u.Duration.Milliseconds()}}
	if !u.Reported {
		c.Tokens, c.Estimated = promptTokens+estimateTokens(replyBytes(resp.Message)), true
	}
	return c
}

// overBudget is the refusal of an observed effect that took its task past
// the token or output budget: the turn is marked exhausted, so the task
// fails with that budget's reason, and the executor is refused the result.
func overBudget(ts *turnState, b store.Budgets) error {
	k, over := b.Over()
	if !over {
		return nil
	}
	used, limit := b.ModelTokens.Used, b.ModelTokens.Limit
	if k == store.BudgetOutputBytes {
		used, limit = b.OutputBytes.Used, b.OutputBytes.Limit
	}
	return effectError(ts, &store.BudgetError{Budget: k, Limit: limit, Used: used})
}
