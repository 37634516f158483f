package machinespirit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/taskhost/taskhost/sdk"
)

const (
	// maxToolRounds bounds the model calls of one model effect with
	// tools: a model that still asks for tools after that many fails the
	// node rather than spend the task's budgets in a loop.
	maxToolRounds = 8
	// maxModelToolResultBytes bounds a tool's output fed back to the
	// model, as legacy does: one verbose tool should not make the next
	// request too large for the host.
	maxModelToolResultBytes = 32 << 10
)

// toolRoundsError is a model that still asked for tools in its last
// round; the worker sees it as tool_rounds_exhausted.
type toolRoundsError struct{ rounds int }

func (e *toolRoundsError) Error() string {
	return fmt.Sprintf("the model still asked for tools after %d model calls, the most one answer may take with tools", e.rounds)
}

// modelWithTools runs a model call whose model may call the named tools:
// each tool call it asks for goes through the host's tool service (its
// policy, approvals, budget and ledger), its result is fed back, and the
// model is asked again, for at most maxToolRounds calls; the reply
// without tool calls is the effect's. Every round names the same parent,
// so each is one call at the depth of the first.
func (st *stepState) modelWithTools(ctx context.Context, req sdk.ModelRequest, names []string, seq int) (sdk.ModelResponse, error) {
	specs, err := st.toolSpecs(ctx, names)
	if err != nil {
		return sdk.ModelResponse{}, err
	}
	req.Tools = specs
	calls := 0
	for round := 1; ; round++ {
		resp, err := st.callModel(ctx, req)
		if err != nil || len(resp.Message.ToolCalls) == 0 {
			return resp, err
		}
		if round == maxToolRounds {
			return resp, &toolRoundsError{rounds: round}
		}
		msg := resp.Message
		msg.Role = "assistant"
		msg.ToolCalls = slices.Clone(msg.ToolCalls)
		for i := range msg.ToolCalls {
			if msg.ToolCalls[i].ID == "" {
				msg.ToolCalls[i].ID = fmt.Sprintf("machinespirit_call_%d", calls+i+1)
			}
		}
		req.Messages = append(req.Messages, msg)
		for _, call := range msg.ToolCalls {
			calls++
			content, err := st.modelToolCall(ctx, specs, call, fmt.Sprintf("machinespirit:%s:%d:%d.%d", st.req.TaskID, st.execution, seq, calls))
			if err != nil {
				return sdk.ModelResponse{}, err
			}
			req.Messages = append(req.Messages, sdk.Message{Role: "tool", Content: content, ToolCallID: call.ID})
		}
	}
}

// toolSpecs are the host's specs of the named tools. A name the host does
// not offer this task is refused: the node's tools must be among those
// the task's policy lets it call.
func (st *stepState) toolSpecs(ctx context.Context, names []string) ([]sdk.ToolSpec, error) {
	if !st.offeredOK {
		offered, err := st.host.Tools(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing the host's tools: %w", err)
		}
		st.offered, st.offeredOK = offered, true
	}
	specs := make([]sdk.ToolSpec, 0, len(names))
	for _, n := range names {
		i := slices.IndexFunc(st.offered, func(s sdk.ToolSpec) bool { return s.Name == n })
		if i < 0 {
			return nil, &sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: fmt.Sprintf("tools: %q is not a tool this task may call", truncate(n, maxToolNameBytes))}
		}
		specs = append(specs, st.offered[i])
	}
	return specs, nil
}

// modelToolCall runs one tool call the model asked for and returns what
// the model reads of it. A call the host would refuse as malformed (a
// tool not offered, arguments that are not JSON) is told to the model,
// which can correct it, as legacy does; a refusal of the host (budget,
// approval, an unsettled effect) ends the effect.
func (st *stepState) modelToolCall(ctx context.Context, specs []sdk.ToolSpec, call sdk.ToolCall, key string) (string, error) {
	if !slices.ContainsFunc(specs, func(s sdk.ToolSpec) bool { return s.Name == call.Name }) {
		return fmt.Sprintf("error: there is no tool %q in this node", truncate(call.Name, maxToolNameBytes)), nil
	}
	args := call.Arguments
	if args == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return "error: the tool arguments are not valid JSON", nil
	}
	res, err := st.host.CallTool(ctx, sdk.ToolRequest{Name: call.Name, Arguments: args, IdempotencyKey: key})
	if err != nil {
		return "", err
	}
	return res.ForModel(maxModelToolResultBytes), nil
}
