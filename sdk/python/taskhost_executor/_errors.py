"""Errors of host calls, mapped from the wire's ServiceError as the Go SDK
maps them (sdk/hosterrors.go; docs/executor-sdk.md, "Errors of a service
call")."""

from typing import Dict, Optional

# HostError kinds: the Go SDK's Err values.
UNIMPLEMENTED = "unimplemented"
PERMISSION_DENIED = "permission_denied"
BUDGET_EXHAUSTED = "budget_exhausted"
INVALID_ARGUMENT = "invalid_argument"
HOST_UNAVAILABLE = "host_unavailable"
MODEL_UNAVAILABLE = "model_unavailable"
MODEL_FAILED = "model_failed"
EFFECT_UNSETTLED = "effect_unsettled"

# google.rpc.Code numbers the protocol uses.
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_PERMISSION_DENIED = 7
CODE_RESOURCE_EXHAUSTED = 8
CODE_UNIMPLEMENTED = 12

_BY_CODE = {
    CODE_UNIMPLEMENTED: UNIMPLEMENTED,
    CODE_PERMISSION_DENIED: PERMISSION_DENIED,
    CODE_RESOURCE_EXHAUSTED: BUDGET_EXHAUSTED,
    CODE_INVALID_ARGUMENT: INVALID_ARGUMENT,
}


class Cancelled(Exception):
    """The step was cancelled (the host cancelled its stream, or the plugin
    is stopping): stop, and return or raise; nothing more is sent."""


class HostError(Exception):
    """A host call the host refused or could not serve.

    kind is one of the kind constants (UNIMPLEMENTED, BUDGET_EXHAUSTED, ...);
    code, reason and metadata are the wire's ServiceError."""

    def __init__(self, kind: str, message: str, code: int = 0, reason: str = "",
                 metadata: Optional[Dict[str, str]] = None):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata = dict(metadata or {})


def error_from_wire(method: str, code: int, message: str, reason: str, metadata: Dict[str, str]) -> Exception:
    """The exception a ServiceError stands for: Cancelled for a cancelled
    call, else a HostError."""
    if reason == "MODEL_UNAVAILABLE":
        kind = MODEL_UNAVAILABLE
    elif reason == "MODEL_FAILED":
        kind = MODEL_FAILED
    elif reason == "EFFECT_UNSETTLED":
        kind = EFFECT_UNSETTLED
    elif code in (CODE_CANCELLED, CODE_DEADLINE_EXCEEDED):
        return Cancelled(f"{method}: {message}")
    elif code == CODE_RESOURCE_EXHAUSTED and "larger than max" in message:
        # A message over the size limit, not a spent budget.
        kind = INVALID_ARGUMENT
    else:
        kind = _BY_CODE.get(code, HOST_UNAVAILABLE)
    return HostError(kind, f"{method}: {message}", code, reason, metadata)
