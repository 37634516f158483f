"""Conversions between the generated protocol messages
(shared/proto/python/executor_pb2.py) and the SDK's plain types."""

import os
import sys

from . import _types as t

try:
    import executor_pb2 as pb  # on sys.path already: an installed copy
except ImportError:  # the repository's layout: sdk/python beside shared/proto
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path.append(os.path.normpath(os.path.join(_here, "..", "..", "..", "shared", "proto", "python")))
    import executor_pb2 as pb  # noqa: E402

PROTOCOL_VERSION = 2
MAGIC_COOKIE_KEY = "TASKHOST_EXECUTOR_PLUGIN"
MAGIC_COOKIE_VALUE = "7f3c1b0e-taskhost-executor"
MAX_MESSAGE_BYTES = 4 << 20
MAX_CALLS_IN_FLIGHT = 32
MAX_FAIL_MESSAGE_BYTES = 2000


def describe_to_pb(d: t.Description) -> "pb.DescribeResponse":
    return pb.DescribeResponse(kind=d.kind, version=d.version, protocol_version=PROTOCOL_VERSION,
                               checkpoint_schemas=list(d.checkpoint_schemas),
                               capabilities=list(d.capabilities), runtime=dict(d.runtime))


def _budgets(b) -> t.Budgets:
    return t.Budgets(b.steps, b.tool_calls, b.model_calls, b.depth, b.wall_seconds, b.model_tokens, b.output_bytes)


def step_request_from_pb(m) -> t.StepRequest:
    cp = t.Checkpoint(m.checkpoint.schema, bytes(m.checkpoint.payload)) if m.HasField("checkpoint") else None
    return t.StepRequest(
        task_id=m.task_id, run_id=m.run_id, attempt=m.attempt, spec=bytes(m.spec),
        recent=[t.Summary(s.step, s.summary) for s in m.recent], checkpoint=cp,
        remaining=_budgets(m.remaining), limits=_budgets(m.limits), summary_chars=m.summary_chars,
        indeterminate=[t.Effect(e.attempt, e.seq, e.kind, e.fingerprint, e.idempotency_key, e.status, e.summary)
                       for e in m.indeterminate],
        model_prompt_tokens=m.model_prompt_tokens,
        children=[t.ChildTask(c.task_id, c.status, c.reason, c.result) for c in m.children],
    )


def _checkpoint_to_pb(cp):
    return None if cp is None else pb.Checkpoint(schema=cp.schema, payload=bytes(cp.payload))


def fail_response(reason: str, message: str) -> "pb.StepResponse":
    msg = message.encode("utf-8")[:MAX_FAIL_MESSAGE_BYTES].decode("utf-8", "ignore")
    return pb.StepResponse(fail=pb.StepFail(reason=reason, message=msg))


def step_result_to_pb(r) -> "pb.StepResponse":
    """A result of no known outcome (or not a StepResult) becomes a failure
    rather than a guess."""
    if not isinstance(r, t.StepResult):
        return fail_response("executor_failed", f"step returned {type(r).__name__}, not a StepResult")
    if r.outcome == t.CONTINUE:
        return pb.StepResponse(**{"continue": pb.StepContinue(summary=r.summary, checkpoint=_checkpoint_to_pb(r.checkpoint))})
    if r.outcome == t.COMPLETE:
        return pb.StepResponse(complete=pb.StepComplete(summary=r.summary, result=bytes(r.result),
                                                        checkpoint=_checkpoint_to_pb(r.checkpoint)))
    if r.outcome == t.FAIL:
        return fail_response(r.reason, r.message)
    return fail_response("executor_failed", f"step returned a result of unknown outcome {r.outcome!r}")


def _message_to_pb(m: t.Message):
    return pb.ChatMessage(role=m.role, content=m.content, tool_call_id=m.tool_call_id,
                          tool_calls=[pb.ToolCall(id=c.id, name=c.name, arguments_json=c.arguments) for c in m.tool_calls])


def _message_from_pb(m) -> t.Message:
    return t.Message(m.role, m.content, [t.ToolCall(c.id, c.name, c.arguments_json) for c in m.tool_calls], m.tool_call_id)


def _specs_to_pb(specs):
    return [pb.ToolSpec(name=s.name, description=s.description, parameters_json=s.parameters) for s in specs]


def tool_specs_from_pb(specs):
    return [t.ToolSpec(s.name, s.description, s.parameters_json) for s in specs]


def model_request_to_pb(req: t.ModelRequest):
    return pb.CallModelRequest(messages=[_message_to_pb(m) for m in req.messages], tools=_specs_to_pb(req.tools),
                               parent_call_token=req.parent_call_token)


def model_response_from_pb(m) -> t.ModelResponse:
    return t.ModelResponse(_message_from_pb(m.message), m.call_token, m.depth, m.replayed, m.finish_reason,
                           t.ModelUsage(m.prompt_tokens, m.completion_tokens, m.duration_ms))


def tool_request_to_pb(req: t.ToolRequest):
    return pb.CallToolRequest(name=req.name, arguments_json=req.arguments, idempotency_key=req.idempotency_key,
                              idempotent=req.idempotent)


def tool_response_from_pb(m) -> t.ToolResponse:
    return t.ToolResponse(m.result_json, m.is_error, m.replayed)
