"""The SDK's plain types: what an executor sees of the protocol.

No generated protobuf type appears here, so the wire can grow without
breaking executors (the Go SDK's sdk/types.go is the model).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

# Outcomes of a step.
CONTINUE = "continue"
COMPLETE = "complete"
FAIL = "fail"


@dataclass
class Description:
    """What the executor is. kind is its [executors.NAME] name."""

    kind: str
    version: str
    # Every checkpoint schema step() accepts, newest first, e.g. "pyexample/1".
    checkpoint_schemas: List[str]
    capabilities: List[str] = field(default_factory=list)
    runtime: Dict[str, str] = field(default_factory=dict)


@dataclass
class Budgets:
    """A coarse view of a task's budgets (limits, or what remains)."""

    steps: int = 0
    tool_calls: int = 0
    model_calls: int = 0
    depth: int = 0
    wall_seconds: int = 0
    model_tokens: int = 0
    output_bytes: int = 0


@dataclass
class Summary:
    step: int
    text: str


@dataclass
class Checkpoint:
    """The executor's own state between steps; the host never reads it."""

    schema: str
    payload: bytes


@dataclass
class Effect:
    """A ledger entry the host left unsettled (StepRequest.indeterminate)."""

    attempt: int
    seq: int
    kind: str
    fingerprint: str = ""
    idempotency_key: str = ""
    status: str = ""
    summary: str = ""


@dataclass
class ChildTask:
    task_id: str
    status: str
    reason: str = ""
    result: str = ""


@dataclass
class StepRequest:
    """Everything the executor learns about a task for one step."""

    task_id: str
    run_id: int
    attempt: int
    spec: bytes  # JSON: at least "goal"
    recent: List[Summary]
    checkpoint: Optional[Checkpoint]  # None on a task's first step
    remaining: Budgets
    limits: Budgets
    summary_chars: int
    indeterminate: List[Effect]
    model_prompt_tokens: int
    children: List[ChildTask]


@dataclass
class StepResult:
    """A step's outcome: build it with continue_, complete or fail."""

    outcome: str
    summary: str = ""
    result: bytes = b""
    checkpoint: Optional[Checkpoint] = None  # None keeps the previous one
    reason: str = ""
    message: str = ""


def continue_(summary: str, checkpoint: Optional[Checkpoint] = None) -> StepResult:
    """Ends the step with more work to do."""
    return StepResult(CONTINUE, summary=summary, checkpoint=checkpoint)


def complete(summary: str, result: bytes, checkpoint: Optional[Checkpoint] = None) -> StepResult:
    """Ends the task successfully with result (bytes, at most 64 KiB)."""
    return StepResult(COMPLETE, summary=summary, result=result, checkpoint=checkpoint)


def fail(reason: str, message: str) -> StepResult:
    """Ends the task as failed; reason is a code such as "no_progress"."""
    return StepResult(FAIL, reason=reason, message=message)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON


@dataclass
class Message:
    role: str  # "system", "user", "assistant", "tool"
    content: str = ""
    tool_calls: List[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""


@dataclass
class ToolSpec:
    name: str
    description: str = ""
    parameters: str = ""  # a JSON schema


@dataclass
class ModelRequest:
    messages: List[Message]
    tools: List[ToolSpec] = field(default_factory=list)
    parent_call_token: str = ""


@dataclass
class ModelUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_millis: int = 0


@dataclass
class ModelResponse:
    message: Message
    call_token: str
    depth: int
    replayed: bool
    finish_reason: str  # "stop", "tool_calls", "length" or ""
    usage: ModelUsage


@dataclass
class ToolRequest:
    name: str
    arguments: str  # JSON
    idempotency_key: str = ""
    idempotent: bool = False


@dataclass
class ToolResponse:
    result: str  # JSON
    is_error: bool
    replayed: bool
