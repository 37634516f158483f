"""One step: the RunStep stream's plugin end (docs/executor-sdk.md,
"A step: the RunStep stream")."""

import json
import threading
from typing import Dict, List, Optional

from . import _types as t
from . import _wire as w
from ._errors import HOST_UNAVAILABLE, INVALID_ARGUMENT, PERMISSION_DENIED, Cancelled, HostError, error_from_wire

pb = w.pb


class StepContext:
    """The step's cancellation: it ends when the host cancels the step's
    stream, or the plugin stops. Every wait of a step should go through
    wait(), so that it returns when the step is cancelled."""

    def __init__(self):
        self._done = threading.Event()
        self._hooks: List = []
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._done.is_set()

    def wait(self, seconds: Optional[float] = None) -> bool:
        """Sleeps up to seconds (None: until cancelled); True when the step
        was cancelled."""
        return self._done.wait(seconds)

    def check(self) -> None:
        """Raises Cancelled when the step was cancelled."""
        if self._done.is_set():
            raise Cancelled("the step was cancelled")

    def cancel(self) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._done.set()
            hooks, self._hooks = self._hooks, []
        for h in hooks:
            h()

    def on_cancel(self, fn) -> None:
        """Runs fn (once, on some thread) when the step is cancelled; at
        once when it already is."""
        with self._lock:
            if not self._done.is_set():
                self._hooks.append(fn)
                return
        fn()


class _HostProtocolError(Exception):
    """The host broke the message sequence."""


_WAITING = object()
_ABANDONED = object()


class StreamCalls:
    """Carries one step's host-service calls on its stream: each call gets
    the next call id and waits for the reply of that id. At most
    MAX_CALLS_IN_FLIGHT are in flight: a slot is freed by the call's reply,
    not by its cancellation (the host counts a call until it answered)."""

    def __init__(self, ctx: StepContext, send):
        self._ctx = ctx
        self._send = send  # puts one PluginMessage on the outgoing queue
        self._cv = threading.Condition()
        self._last_id = 0
        self._pending: Dict[int, object] = {}
        self._ended: Optional[str] = None  # why the stream's receive side ended
        self.protocol_error: Optional[str] = None
        ctx.on_cancel(self._wake)

    def _wake(self):
        with self._cv:
            self._cv.notify_all()

    def receive(self, requests) -> None:
        """Hands each reply to its call until the stream ends."""
        why = "the host ended the step's stream"
        try:
            for m in requests:
                if m.WhichOneof("msg") != "reply":
                    raise _HostProtocolError("a message other than a reply during the step")
                self._deliver(m.reply)
        except _HostProtocolError as e:
            why = str(e)
            self.protocol_error = why
            self._ctx.cancel()
        except Exception as e:  # grpc.RpcError: the stream broke or was cancelled
            why = f"the step's stream ended: {e}"
        # The host sends until the step's result and never half-closes, so
        # the end of its side is the stream's: cancelled (grpcio may end the
        # iterator cleanly before it reports the cancellation) or broken.
        # The step is over, and its calls see a cancellation.
        self._ctx.cancel()
        with self._cv:
            self._ended = why
            self._cv.notify_all()

    def _deliver(self, reply) -> None:
        with self._cv:
            state = self._pending.get(reply.call_id)
            if state is None:
                raise _HostProtocolError(f"a reply to call id {reply.call_id}, which is not in flight")
            if state is _ABANDONED:
                del self._pending[reply.call_id]
            else:
                self._pending[reply.call_id] = reply
            self._cv.notify_all()

    def _in_flight(self) -> int:
        return sum(1 for v in self._pending.values() if not isinstance(v, pb.ServiceReply))

    def call(self, method: str, field: str, request):
        """Sends one call and returns its reply's response of kind field."""
        sc = pb.ServiceCall(**{field: request})
        with self._cv:
            while self._in_flight() >= w.MAX_CALLS_IN_FLIGHT and not self._stop_reason():
                self._cv.wait()
            self._raise_stopped(method)
            sc.call_id = self._last_id + 1
            msg = pb.PluginMessage(call=sc)
            if msg.ByteSize() > w.MAX_MESSAGE_BYTES:
                raise HostError(INVALID_ARGUMENT, f"{method}: request of {msg.ByteSize()} bytes exceeds the {w.MAX_MESSAGE_BYTES}-byte limit")
            self._last_id = sc.call_id
            self._pending[sc.call_id] = _WAITING
            # Under the lock, so that ids go out in order.
            self._send(msg)
            while self._pending[sc.call_id] is _WAITING and not self._stop_reason():
                self._cv.wait()
            reply = self._pending[sc.call_id]
            if reply is _WAITING:
                self._pending[sc.call_id] = _ABANDONED
                if self._ended is None:
                    self._send(pb.PluginMessage(cancel=pb.CancelCall(call_id=sc.call_id)))
                self._raise_stopped(method)
            del self._pending[sc.call_id]
        kind = reply.WhichOneof("response")
        if kind == "error":
            e = reply.error
            raise error_from_wire(method, e.code, e.message, e.reason, dict(e.metadata))
        if kind != field:
            raise HostError(HOST_UNAVAILABLE, f"{method}: the host answered with a reply of another kind ({kind})")
        return getattr(reply, field)

    def _stop_reason(self) -> bool:
        return self._ctx.cancelled or self._ended is not None

    def _raise_stopped(self, method: str) -> None:
        if self._ctx.cancelled:
            raise Cancelled(f"{method}: the step was cancelled")
        if self._ended is not None:
            raise HostError(HOST_UNAVAILABLE, f"{method}: {self._ended}")


class Host:
    """The executor's only way to the outside world, for one step. Every
    call is counted against the task's budgets, gated and recorded by the
    host; it blocks until answered and raises Cancelled when the step is
    cancelled, HostError when the host refuses it. Safe to use from several
    threads of the step at once."""

    def __init__(self, calls: StreamCalls):
        self._calls = calls
        self._ended = False

    def _call(self, method, field, request):
        if self._ended:
            raise HostError(PERMISSION_DENIED, f"{method}: the step this host handle belongs to has ended")
        return self._calls.call(method, field, request)

    def call_model(self, req: t.ModelRequest) -> t.ModelResponse:
        return w.model_response_from_pb(self._call("CallModel", "call_model", w.model_request_to_pb(req)))

    def call_tool(self, req: t.ToolRequest) -> t.ToolResponse:
        return w.tool_response_from_pb(self._call("CallTool", "call_tool", w.tool_request_to_pb(req)))

    def request_approval(self, prompt: str) -> str:
        """Returns "approved"; a rejection fails the task (a HostError here)."""
        d = self._call("RequestApproval", "request_approval", pb.RequestApprovalRequest(prompt=prompt)).decision
        if d not in ("approved", "rejected"):
            # Fail closed: anything but an explicit approval is no approval.
            raise HostError(HOST_UNAVAILABLE, f"RequestApproval: host answered with unknown decision {d!r}")
        return d

    def request_input(self, question: str):
        """Asks the task's principal; returns their answer, decoded from
        JSON (None when they approved without a value)."""
        raw = self._call("RequestInput", "request_input", pb.RequestInputRequest(question=question)).value_json
        try:
            return json.loads(raw)
        except ValueError:
            raise HostError(HOST_UNAVAILABLE, f"RequestInput: host answered with {len(raw)} bytes that are not JSON") from None

    def progress(self, note: str) -> None:
        self._call("Progress", "progress", pb.ProgressRequest(note=note))

    def tools(self) -> List[t.ToolSpec]:
        return w.tool_specs_from_pb(self._call("ListTools", "list_tools", pb.ListToolsRequest()).tools)

    def abandon_effect(self, e: t.Effect) -> None:
        self._call("AbandonEffect", "abandon_effect", pb.AbandonEffectRequest(attempt=e.attempt, seq=e.seq))
