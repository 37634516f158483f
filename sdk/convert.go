package sdk

import (
	"fmt"
	"math"

	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// This file converts between the generated protocol types and the SDK's own
// types, so that no generated type appears in the SDK's exported API and the
// protocol can grow without breaking executors.

func stepRequestFromPB(in *executorpb.StepRequest) StepRequest {
	out := StepRequest{
		TaskID:    in.GetTaskId(),
		RunID:     int64(in.GetRunId()),
		Attempt:   int64(in.GetAttempt()),
		Spec:      in.GetSpec(),
		Remaining: budgetsFromPB(in.GetRemaining()),
		Limits:    budgetsFromPB(in.GetLimits()),

		SummaryChars:      int(in.GetSummaryChars()),
		ModelPromptTokens: int64(in.GetModelPromptTokens()),
	}
	for _, s := range in.GetRecent() {
		out.Recent = append(out.Recent, Summary{Step: int64(s.GetStep()), Text: s.GetSummary()})
	}
	for _, c := range in.GetChildren() {
		out.Children = append(out.Children, ChildTask{TaskID: c.GetTaskId(), Status: c.GetStatus(), Reason: c.GetReason(), Result: c.GetResult()})
	}
	if cp := in.GetCheckpoint(); cp != nil {
		out.Checkpoint = &Checkpoint{Schema: cp.GetSchema(), Payload: cp.GetPayload()}
	}
	for _, e := range in.GetIndeterminate() {
		out.Indeterminate = append(out.Indeterminate, Effect{
			Attempt:        int64(e.GetAttempt()),
			Seq:            int64(e.GetSeq()),
			Kind:           e.GetKind(),
			Fingerprint:    e.GetFingerprint(),
			IdempotencyKey: e.GetIdempotencyKey(),
			Status:         e.GetStatus(),
			Summary:        e.GetSummary(),
		})
	}
	return out
}

func budgetsFromPB(b *executorpb.Budgets) Budgets {
	return Budgets{
		Steps:       b.GetSteps(),
		ToolCalls:   b.GetToolCalls(),
		ModelCalls:  b.GetModelCalls(),
		Depth:       b.GetDepth(),
		WallSeconds: b.GetWallSeconds(),
		ModelTokens: b.GetModelTokens(),
		OutputBytes: b.GetOutputBytes(),
	}
}

func checkpointToPB(cp *Checkpoint) *executorpb.Checkpoint {
	if cp == nil {
		return nil
	}
	return &executorpb.Checkpoint{Schema: cp.Schema, Payload: cp.Payload}
}

// stepResultToPB converts an executor's result. A result without a known
// outcome (a zero StepResult, say) becomes a failure rather than a guess.
func stepResultToPB(r StepResult) *executorpb.StepResponse {
	switch r.Outcome {
	case OutcomeContinue:
		return &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Continue{
			Continue: &executorpb.StepContinue{Summary: r.Summary, Checkpoint: checkpointToPB(r.Checkpoint)},
		}}
	case OutcomeComplete:
		return &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Complete{
			Complete: &executorpb.StepComplete{Summary: r.Summary, Result: r.Result, Checkpoint: checkpointToPB(r.Checkpoint)},
		}}
	case OutcomeFail:
		return failResponse(r.Reason, r.Message)
	}
	return failResponse(reasonExecutorFailed, "executor returned a step result without an outcome ("+r.Outcome.String()+")")
}

// reasonExecutorFailed is the reason code of a step the executor could not
// finish for a reason of its own.
const reasonExecutorFailed = "executor_failed"

// failResponse builds a failed step. The message is bounded here, once, so
// neither an executor's Fail nor a long error chain can push an unbounded
// text towards the store.
func failResponse(reason, message string) *executorpb.StepResponse {
	if reason == "" {
		reason = reasonExecutorFailed
	}
	return &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Fail{
		Fail: &executorpb.StepFail{Reason: reason, Message: text.Truncate(message, maxFailMessageBytes)},
	}}
}

func modelRequestToPB(token string, r ModelRequest) *executorpb.CallModelRequest {
	out := &executorpb.CallModelRequest{TurnToken: token, ParentCallToken: r.ParentCallToken}
	for _, m := range r.Messages {
		out.Messages = append(out.Messages, messageToPB(m))
	}
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, &executorpb.ToolSpec{Name: t.Name, Description: t.Description, ParametersJson: t.Parameters})
	}
	return out
}

func messageToPB(m Message) *executorpb.ChatMessage {
	out := &executorpb.ChatMessage{Role: m.Role, Content: m.Content, ToolCallId: m.ToolCallID}
	for _, c := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, &executorpb.ToolCall{Id: c.ID, Name: c.Name, ArgumentsJson: c.Arguments})
	}
	return out
}

func messageFromPB(m *executorpb.ChatMessage) Message {
	out := Message{Role: m.GetRole(), Content: m.GetContent(), ToolCallID: m.GetToolCallId()}
	for _, c := range m.GetToolCalls() {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.GetId(), Name: c.GetName(), Arguments: c.GetArgumentsJson()})
	}
	return out
}

func modelResponseFromPB(r *executorpb.CallModelResponse) ModelResponse {
	return ModelResponse{
		Message:   messageFromPB(r.GetMessage()),
		CallToken: r.GetCallToken(),
		Depth:     int64(r.GetDepth()),
		Replayed:  r.GetReplayed(),

		FinishReason: text.Truncate(r.GetFinishReason(), 32),
		Usage: ModelUsage{PromptTokens: max(r.GetPromptTokens(), 0), CompletionTokens: max(r.GetCompletionTokens(), 0),
			DurationMillis: max(r.GetDurationMs(), 0)},
	}
}

func toolRequestToPB(token string, r ToolRequest) *executorpb.CallToolRequest {
	return &executorpb.CallToolRequest{
		TurnToken:      token,
		Name:           r.Name,
		ArgumentsJson:  r.Arguments,
		IdempotencyKey: r.IdempotencyKey,
		Idempotent:     r.Idempotent,
	}
}

func toolResponseFromPB(r *executorpb.CallToolResponse) ToolResponse {
	return ToolResponse{Result: r.GetResultJson(), IsError: r.GetIsError(), Replayed: r.GetReplayed()}
}

func describeToPB(d Description) *executorpb.DescribeResponse {
	return &executorpb.DescribeResponse{
		Kind:              d.Kind,
		Version:           d.Version,
		ProtocolVersion:   executorpb.ProtocolVersion,
		CheckpointSchemas: d.CheckpointSchemas,
		Capabilities:      d.Capabilities,
		Runtime:           d.Runtime,
	}
}

func approvalRequestToPB(token, prompt string) *executorpb.RequestApprovalRequest {
	return &executorpb.RequestApprovalRequest{TurnToken: token, Prompt: prompt}
}

func inputRequestToPB(token, question string) *executorpb.RequestInputRequest {
	return &executorpb.RequestInputRequest{TurnToken: token, Question: question}
}

// abandonToPB names the effect by its key; one the wire cannot carry is
// no effect the host told of.
func abandonToPB(token string, e Effect) (*executorpb.AbandonEffectRequest, error) {
	if e.Attempt < 1 || e.Seq < 1 || e.Attempt > math.MaxUint32 || e.Seq > math.MaxUint32 {
		return nil, &HostError{Kind: ErrInvalidArgument, Message: fmt.Sprintf("AbandonEffect: effect %d/%d is not one the host told of", e.Attempt, e.Seq)}
	}
	return &executorpb.AbandonEffectRequest{TurnToken: token, Attempt: uint32(e.Attempt), Seq: uint32(e.Seq)}, nil
}

func progressToPB(token, note string) *executorpb.ProgressRequest {
	return &executorpb.ProgressRequest{TurnToken: token, Note: note}
}

func listToolsToPB(token string) *executorpb.ListToolsRequest {
	return &executorpb.ListToolsRequest{TurnToken: token}
}

func toolSpecsFromPB(r *executorpb.ListToolsResponse) []ToolSpec {
	specs := make([]ToolSpec, 0, len(r.GetTools()))
	for _, t := range r.GetTools() {
		specs = append(specs, ToolSpec{Name: t.GetName(), Description: t.GetDescription(), Parameters: t.GetParametersJson()})
	}
	return specs
}
