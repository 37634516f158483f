package legacy

import (
	"fmt"

	"github.com/taskhost/taskhost/sdk"
)

// Keeping a request within the model's context.
//
// The host says how many prompt tokens a request may hold
// (StepRequest.ModelPromptTokens: [model] context_tokens less max_tokens).
// The executor cannot count tokens, so it counts bytes and converts them
// at a rate it learns from the server: after each reply, the request's
// bytes over the prompt_tokens the server reported. Before that first
// reply it assumes initialBytesPerToken, which only the first call of a
// step relies on, and that call holds no tool results to cut anyway.
//
// When a request would not fit, the oldest tool results are cut first
// (each to its first keptResultBytes, with a note saying so), then the
// arguments of the oldest tool calls (replaced by a short JSON object),
// newest last. The system message (goal and step summaries) and the user
// prompt always stay whole. Cutting is a pure function of the history and
// the rate, so a re-run of the step sends the same requests again and the
// host replays their recorded replies.
const (
	initialBytesPerToken = 2.5
	// fitMargin is the share of the budget a request is cut to: the rate
	// is an average, and a chat template adds tokens of its own.
	fitMargin = 0.9
	// keptResultBytes is how much of a cut tool result is kept.
	keptResultBytes = 256
	// messageOverheadBytes stands in for a message's role and framing.
	messageOverheadBytes = 16
	// cutArguments replaces the arguments of a cut tool call.
	cutArguments = `{"cut":"to fit the model's context"}`
)

// fitter holds what the turn learnt of the server's token counts.
type fitter struct {
	budget        int64   // prompt tokens a request may hold; 0: no bound
	bytesPerToken float64 // learnt from the last reply's usage
}

func newFitter(budget int64) *fitter {
	return &fitter{budget: budget, bytesPerToken: initialBytesPerToken}
}

// requestBytes is the size the fitter counts for a request.
func requestBytes(history []sdk.Message, tools []sdk.ToolSpec) int {
	n := 0
	for _, m := range history {
		n += messageBytes(m)
	}
	for _, t := range tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters) + messageOverheadBytes
	}
	return n
}

func messageBytes(m sdk.Message) int {
	n := len(m.Content) + messageOverheadBytes
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments) + messageOverheadBytes
	}
	return n
}

// learn updates the rate from a reply to a request of reqBytes.
func (f *fitter) learn(reqBytes int, u sdk.ModelUsage) {
	if u.PromptTokens > 0 && reqBytes > 0 {
		f.bytesPerToken = float64(reqBytes) / float64(u.PromptTokens)
	}
}

// refused is told the server refused a request as too long: it holds more
// tokens than the rate said, so the rate is lowered before a retry.
func (f *fitter) refused() { f.bytesPerToken *= 0.6 }

// fit returns history cut to fit the budget (history itself is not
// changed) and how many messages it cut.
func (f *fitter) fit(history []sdk.Message, tools []sdk.ToolSpec) ([]sdk.Message, int) {
	if f.budget <= 0 {
		return history, 0
	}
	limit := int(float64(f.budget) * f.bytesPerToken * fitMargin)
	excess := requestBytes(history, tools) - limit
	if excess <= 0 {
		return history, 0
	}
	out := make([]sdk.Message, len(history))
	copy(out, history)
	cut := 0
	// Tool results, oldest first.
	for i := range out {
		if excess <= 0 {
			break
		}
		m := out[i]
		if m.Role != "tool" || len(m.Content) <= keptResultBytes {
			continue
		}
		before := len(m.Content)
		m.Content = truncateBytes(m.Content, keptResultBytes) + fmt.Sprintf("\n[%d bytes of this result cut to fit the model's context]", before-keptResultBytes)
		excess -= before - len(m.Content)
		out[i] = m
		cut++
	}
	// Then the arguments of tool calls, oldest first.
	for i := range out {
		if excess <= 0 {
			break
		}
		m := out[i]
		if len(m.ToolCalls) == 0 {
			continue
		}
		calls := make([]sdk.ToolCall, len(m.ToolCalls))
		copy(calls, m.ToolCalls)
		changed := false
		for j, c := range calls {
			if excess <= 0 || len(c.Arguments) <= len(cutArguments) {
				continue
			}
			excess -= len(c.Arguments) - len(cutArguments)
			calls[j].Arguments = cutArguments
			changed = true
		}
		if changed {
			m.ToolCalls = calls
			out[i] = m
			cut++
		}
	}
	return out, cut
}
