#!/usr/bin/python3
"""probe: the Python SDK's test executor. Its spec says what a step does:

{"probe": {"do": "calls" | "block_input" | "parallel_progress" | "raise" |
 "host_error" | "huge" | "nothing", "n": 40}}

and the step completes with what it saw, as JSON.
"""

import sys

sys.path[:0] = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--pythonpath=")]

import json  # noqa: E402
import threading  # noqa: E402

import taskhost_executor as th  # noqa: E402


def calls(host):
    """One call of each kind, with what each answered."""
    seen = {}
    host.progress("probing")
    seen["tools"] = [t.name for t in host.tools()]
    r = host.call_model(th.ModelRequest(messages=[th.Message("user", "hello")],
                                        tools=[th.ToolSpec("workspace.write", "writes", "{}")]))
    seen["model"] = {"content": r.message.content, "tool_calls": [[c.id, c.name, c.arguments] for c in r.message.tool_calls],
                     "call_token": r.call_token, "finish": r.finish_reason, "prompt_tokens": r.usage.prompt_tokens}
    t = host.call_tool(th.ToolRequest("workspace.write", '{"path":"a","content":"b"}', idempotency_key="k1", idempotent=True))
    seen["tool"] = {"result": t.result, "is_error": t.is_error}
    seen["input"] = host.request_input("how many?")
    seen["approval"] = host.request_approval("may I?")
    try:
        host.call_tool(th.ToolRequest("shell.run", "{}"))
    except th.HostError as e:
        seen["refused"] = {"kind": e.kind, "code": e.code}
    return seen


def parallel_progress(host, n):
    """n progress calls at once, from n threads."""
    errors = []

    def one(i):
        try:
            host.progress(f"note {i}")
        except Exception as e:  # reported in the result
            errors.append(repr(e))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"calls": n, "errors": errors}


class Probe:
    def describe(self):
        return th.Description(kind="probe", version="0.0.1", checkpoint_schemas=["probe/1"])

    def step(self, ctx, host, req):
        p = json.loads(req.spec).get("probe", {})
        do = p.get("do", "nothing")
        if do == "calls":
            seen = calls(host)
        elif do == "parallel_progress":
            seen = parallel_progress(host, p.get("n", 40))
        elif do == "block_input":
            try:
                host.request_input("never answered")
            except th.HostError as e:
                th.logger().info(f"probe: the blocked call raised {e!r}", extra={"fields": {"ctx_cancelled": ctx.cancelled}})
                raise
            except th.Cancelled:
                # Seen by the step: the host checks the plugin took it.
                host_cancelled = ctx.cancelled
                th.logger().info("probe: the step saw its cancellation", extra={"fields": {"ctx_cancelled": host_cancelled}})
                raise
            seen = {}
        elif do == "progress":
            host.progress("one note")
            seen = {}
        elif do == "raise":
            raise RuntimeError("probe: a bug")
        elif do == "host_error":
            host.call_tool(th.ToolRequest("shell.run", "{}"))
            seen = {}
        elif do == "huge":
            return th.complete("huge", b"x" * (5 << 20))
        else:
            seen = {"attempt": req.attempt, "task": req.task_id,
                    "checkpoint": None if req.checkpoint is None else req.checkpoint.schema}
        return th.complete("probed", json.dumps(seen).encode(), th.Checkpoint("probe/1", b"{}"))


if __name__ == "__main__":
    th.serve(Probe())
