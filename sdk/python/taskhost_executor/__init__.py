"""taskhost_executor: write a taskhost executor in Python.

    import taskhost_executor as th

    class Mine:
        def describe(self):
            return th.Description(kind="mine", version="1.0.0", checkpoint_schemas=["mine/1"])

        def step(self, ctx, host, req):
            ...
            return th.complete("done", b'{"ok":true}')

    th.serve(Mine())

It speaks executor protocol 2 (docs/executor-sdk.md, "Python" and "Wire
protocol") on Debian's python3-grpcio and python3-protobuf.
"""

from ._errors import (BUDGET_EXHAUSTED, EFFECT_UNSETTLED, HOST_UNAVAILABLE, INVALID_ARGUMENT, MODEL_FAILED,
                      MODEL_UNAVAILABLE, PERMISSION_DENIED, UNIMPLEMENTED, Cancelled, HostError)
from ._serve import logger, serve
from ._step import Host, StepContext
from ._types import (COMPLETE, CONTINUE, FAIL, Budgets, Checkpoint, ChildTask, Description, Effect, Message,
                     ModelRequest, ModelResponse, ModelUsage, StepRequest, StepResult, Summary, ToolCall,
                     ToolRequest, ToolResponse, ToolSpec, complete, continue_, fail)
from ._wire import PROTOCOL_VERSION

__all__ = [
    "BUDGET_EXHAUSTED", "EFFECT_UNSETTLED", "HOST_UNAVAILABLE", "INVALID_ARGUMENT", "MODEL_FAILED",
    "MODEL_UNAVAILABLE", "PERMISSION_DENIED", "UNIMPLEMENTED", "Cancelled", "HostError", "logger", "serve",
    "Host", "StepContext", "COMPLETE", "CONTINUE", "FAIL", "Budgets", "Checkpoint", "ChildTask", "Description",
    "Effect", "Message", "ModelRequest", "ModelResponse", "ModelUsage", "StepRequest", "StepResult", "Summary",
    "ToolCall", "ToolRequest", "ToolResponse", "ToolSpec", "complete", "continue_", "fail", "PROTOCOL_VERSION",
]
