"""serve(): the plugin process — handshake, services, one step at a time,
and its stop (docs/executor-sdk.md, "Wire protocol")."""

import json
import logging
import os
import queue
import re
import signal
import sys
import threading
import time
import traceback
from concurrent import futures

import grpc

from . import _types as t
from . import _wire as w
from ._errors import Cancelled, HostError
from ._step import Host, StepContext, StreamCalls

pb = w.pb

PARENT_POLL_SECONDS = 0.1
STOP_TIMEOUT_SECONDS = 2.0
ORPHAN_EXIT_CODE = 3
_KIND_RE = re.compile(r"^[a-z0-9_-]+$")
_HEALTH_SERVING = b"\x08\x01"  # grpc.health.v1.HealthCheckResponse{status: SERVING}


class _JSONFormatter(logging.Formatter):
    """hclog's JSON line, which the host re-logs at its level with its fields."""

    def format(self, record):
        out = {"@level": record.levelname.lower().replace("warning", "warn"), "@message": record.getMessage(),
               "@module": record.name, "@timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))}
        for k, v in getattr(record, "fields", {}).items():
            out[k] = v
        if record.exc_info:
            out["error"] = "".join(traceback.format_exception(*record.exc_info))[-1500:]
        return json.dumps(out)


def logger() -> logging.Logger:
    """A logger whose lines land in the host's log at their level (pass
    fields as extra={"fields": {...}}). Log what an operator needs, never
    prompts, tool output or credentials."""
    log = logging.getLogger("executor")
    if not log.handlers:
        h = logging.StreamHandler(sys.__stderr__)
        h.setFormatter(_JSONFormatter())
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def validate_description(d: t.Description) -> None:
    if not d.kind or not _KIND_RE.match(d.kind):
        raise ValueError(f"executor kind {d.kind!r}: only lowercase letters, digits, '-' and '_' are allowed")
    if not d.version:
        raise ValueError(f"executor {d.kind!r}: version is empty")
    if not d.checkpoint_schemas:
        raise ValueError(f"executor {d.kind!r}: checkpoint_schemas is empty: name at least one, e.g. {d.kind}/1")


class _Gate:
    """Admits one step at a time and ends it when the plugin stops."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running = None  # (StepContext, threading.Event set when it returned)
        self.stopped = False

    def enter(self):
        with self._lock:
            if self.stopped:
                return None, "the plugin is stopping"
            if self._running is not None:
                return None, "a step is already running in this plugin process"
            ctx, done = StepContext(), threading.Event()
            self._running = (ctx, done)
            return (ctx, done), None

    def leave(self, done):
        with self._lock:
            self._running = None
        done.set()

    def stop(self, timeout: float) -> bool:
        """Refuses new steps, cancels the running one and waits up to
        timeout for it to return; True when none is left running."""
        with self._lock:
            self.stopped = True
            running = self._running
        if running is None:
            return True
        running[0].cancel()
        return running[1].wait(timeout)


class _Executor:
    """The Executor service over the user's executor object."""

    def __init__(self, executor, gate: _Gate, log: logging.Logger):
        self._exec, self._gate, self._log = executor, gate, log
        # A step's two threads (its receive loop and the step) come from
        # here, kept between steps: starting two threads was a third of a
        # bare step's round trip. Four: the last step's receive loop may
        # still be winding down when the next step starts.
        self._threads = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="step")

    def describe(self, _request, _context):
        return w.describe_to_pb(self._exec.describe())

    def run_step(self, requests, context):
        first = next(requests, None)
        if first is None or first.WhichOneof("msg") != "step":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message of a step stream must be the step")
        entered, why = self._gate.enter()
        if entered is None:
            code = grpc.StatusCode.UNAVAILABLE if self._gate.stopped else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, why)
        ctx, done = entered
        out: "queue.Queue" = queue.Queue()
        context.add_callback(ctx.cancel)  # the stream ended: cancelled, or over
        if not context.is_active():
            ctx.cancel()
        calls = StreamCalls(ctx, out.put)
        self._threads.submit(calls.receive, requests)
        host = Host(calls)
        self._threads.submit(self._step, ctx, host, first.step, out, done)
        ctx.on_cancel(lambda: out.put(None))
        while True:
            m = out.get()
            if m is None:
                break
            yield m
            if m.WhichOneof("msg") == "result":
                return
        if calls.protocol_error:
            context.abort(grpc.StatusCode.INTERNAL, "sdk: host protocol error: " + calls.protocol_error)
        context.abort(grpc.StatusCode.CANCELLED, "the step was cancelled")

    def _step(self, ctx: StepContext, host: Host, step, out, done):
        try:
            res = self._run(ctx, host, step)
        finally:
            host._ended = True
            self._gate.leave(done)
        # The host cancelled the step or the plugin is stopping: whatever the
        # executor returned is moot.
        if res is not None and not ctx.cancelled:
            out.put(pb.PluginMessage(result=res))
        else:
            out.put(None)

    def _run(self, ctx, host, step):
        try:
            res = self._exec.step(ctx, host, w.step_request_from_pb(step))
        except Cancelled:
            return None
        except HostError as e:
            # An unhandled refusal of the host ends the task as failed, as a
            # Go executor's returned error does.
            return w.fail_response("executor_failed", str(e))
        except BaseException:
            # Like a Go panic: crash the process, so the attempt is
            # interrupted (executor_crashed, the traceback kept) and the
            # task resumable, instead of carrying on in an unknown state.
            traceback.print_exc(file=sys.__stderr__)
            sys.__stderr__.flush()
            os._exit(2)
        out = w.step_result_to_pb(res)
        n = pb.PluginMessage(result=out).ByteSize()
        if n > w.MAX_MESSAGE_BYTES:
            return _oversized(res, n)
        return out


def _oversized(res: t.StepResult, size: int):
    cp = len(res.checkpoint.payload) if res.checkpoint else 0
    largest = max(cp, len(res.result), len(res.summary.encode()))
    reason = "executor_failed"
    if largest and largest == cp:
        reason = "checkpoint_too_large"
    elif largest and largest == len(res.result):
        reason = "result_too_large"
    return w.fail_response(reason, f"step response of {size} bytes exceeds the {w.MAX_MESSAGE_BYTES}-byte message limit "
                                   f"(checkpoint {cp} bytes, result {len(res.result)} bytes, summary {len(res.summary)} characters)")


def _raw(fn):
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=None, response_serializer=None)


def _handlers(ex: _Executor, shutdown):
    executor = grpc.method_handlers_generic_handler("taskhost.executor.v1.Executor", {
        "Describe": grpc.unary_unary_rpc_method_handler(
            ex.describe, request_deserializer=pb.DescribeRequest.FromString,
            response_serializer=pb.DescribeResponse.SerializeToString),
        "RunStep": grpc.stream_stream_rpc_method_handler(
            ex.run_step, request_deserializer=pb.HostMessage.FromString,
            response_serializer=pb.PluginMessage.SerializeToString),
    })
    health = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": _raw(lambda _req, _ctx: _HEALTH_SERVING),
    })

    def controller_shutdown(_req, _ctx):
        threading.Thread(target=shutdown, daemon=True).start()
        return b""  # plugin.Empty

    controller = grpc.method_handlers_generic_handler("plugin.GRPCController", {"Shutdown": _raw(controller_shutdown)})
    return [executor, health, controller]


def _handshake_env():
    """Checks the environment the host starts a plugin with; exits 1 with a
    line on stderr when it is not that."""
    if os.environ.get(w.MAGIC_COOKIE_KEY) != w.MAGIC_COOKIE_VALUE:
        sys.stderr.write("This binary is a taskhost executor plugin. It is not meant to be run directly: "
                         "register it in the host's config ([executors.NAME]).\n")
        sys.exit(1)
    versions = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", str(w.PROTOCOL_VERSION))
    if str(w.PROTOCOL_VERSION) not in [v.strip() for v in versions.split(",")]:
        sys.stderr.write(f"this executor speaks executor protocol {w.PROTOCOL_VERSION} and the host speaks {versions}: "
                         f"use the Python SDK of the host's taskhost\n")
        sys.exit(1)
    sock_dir = os.environ.get("PLUGIN_UNIX_SOCKET_DIR") or os.environ.get("TMPDIR") or "/tmp"
    path = os.path.join(sock_dir, f"plugin-{os.getpid()}.sock")
    if len(path.encode()) > 107:
        sys.stderr.write(f"the socket path {path} is longer than a unix socket's 107 bytes\n")
        sys.exit(1)
    return path


def serve(executor, max_workers: int = 8) -> None:
    """Runs executor as a taskhost executor plugin; call it from the
    script's main. It returns never: the process exits when the host stops
    it (SIGTERM: the running step is cancelled and gets 2 s to return), or
    when the host is gone (status 3).

    executor has describe() -> Description and
    step(ctx: StepContext, host: Host, req: StepRequest) -> StepResult.
    Print nothing to stdout before serve: the handshake is its first line."""
    log = logger()
    try:
        validate_description(executor.describe())
    except Exception as e:
        log.error(f"invalid executor description: {e}")
        sys.exit(1)
    path = _handshake_env()
    gate = _Gate()
    stop = threading.Event()
    why = []

    def shutdown(reason="shutdown"):
        why.append(reason)
        stop.set()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=[
        ("grpc.max_send_message_length", w.MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", w.MAX_MESSAGE_BYTES),
    ])
    for h in _handlers(_Executor(executor, gate, log), shutdown):
        server.add_generic_rpc_handlers((h,))
    if not server.add_insecure_port("unix:" + path):
        log.error(f"cannot listen on unix:{path}")
        sys.exit(1)
    server.start()
    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: shutdown("SIGTERM"))
    sys.stdout.write(f"1|{w.PROTOCOL_VERSION}|unix|{path}|grpc\n")
    sys.stdout.flush()
    # Anything printed from here on lands in the host's log, not on the
    # handshake's pipe.
    os.dup2(2, 1)
    while not stop.wait(PARENT_POLL_SECONDS):
        if os.getppid() != parent:
            why.append("orphaned")
            break
    _stop(server, gate, log, why[0] if why else "orphaned", path)


def _stop(server, gate, log, why, path):
    log.info(f"{why}: stopping the running step and exiting")
    if not gate.stop(STOP_TIMEOUT_SECONDS):
        # The kit looks for these words (sdk/executortest's sdkStepNotReturned).
        log.warning("the running step did not return after its context was cancelled",
                    extra={"fields": {"waited": f"{STOP_TIMEOUT_SECONDS}s"}})
    server.stop(0)
    try:
        os.unlink(path)
    except OSError:
        pass
    sys.__stderr__.flush()
    if why == "SIGTERM":
        # Die by SIGTERM, so the wait status stays the truth about why.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
        os._exit(128 + signal.SIGTERM)
    os._exit(ORPHAN_EXIT_CODE if why == "orphaned" else 0)
