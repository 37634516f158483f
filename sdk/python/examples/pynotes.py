#!/usr/bin/python3
"""pynotes: a taskhost executor in Python, the SDK's example.

A task's spec: {"goal": "...", "notes": {"items": ["a", "b"], "pace_ms": 0,
"result_pad": 0}}. Step 1 asks the model for a plan (a model call); each
later step writes one item's note into the workspace (a tool call,
idempotent under a key, so a re-run after a crash writes it once) and
checkpoints how far it got; the step of the last item completes the task
with the list of notes. pace_ms makes every step wait that long first, and
returns at once when the step is cancelled.

Run it pinned (docs/executor-sdk.md, "Python"):

    [executors.pynotes]
    path = "/path/to/sdk/python/examples/pynotes.py"
    sha256 = "<sha256sum of pynotes.py>"
    interpreter = "/usr/bin/python3"
    interpreter_sha256 = "<sha256sum of /usr/bin/python3, resolved>"
    args = ["--pythonpath=/path/to/sdk/python"]
    read_only = ["/path/to/sdk/python", "/path/to/shared/proto/python"]
"""

import sys

# The host runs this file from the fd it hashed (/proc/self/fd/N), so its
# own directory tells nothing: the config's args name the SDK's.
sys.path[:0] = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--pythonpath=")]

import json  # noqa: E402

import taskhost_executor as th  # noqa: E402

KIND = "pynotes"
SCHEMA = KIND + "/1"
MAX_ITEMS = 64
MAX_ITEM_CHARS = 200
MAX_PAD = 1 << 20


class BadSpec(ValueError):
    pass


def read_spec(raw: bytes):
    spec = json.loads(raw or b"{}")
    notes = spec.get("notes") or {}
    items = notes.get("items") or ["the goal: " + str(spec.get("goal", ""))[:MAX_ITEM_CHARS]]
    if not isinstance(items, list) or len(items) > MAX_ITEMS:
        raise BadSpec(f"notes.items: a list of at most {MAX_ITEMS} strings")
    for i, it in enumerate(items):
        if not isinstance(it, str) or not 0 < len(it) <= MAX_ITEM_CHARS:
            raise BadSpec(f"notes.items[{i}]: a string of 1 to {MAX_ITEM_CHARS} characters")
    pace = notes.get("pace_ms", 0)
    pad = notes.get("result_pad", 0)
    if not isinstance(pace, int) or not 0 <= pace <= 600000:
        raise BadSpec(f"notes.pace_ms = {pace!r}: 0 to 600000")
    if not isinstance(pad, int) or not 0 <= pad <= MAX_PAD:
        raise BadSpec(f"notes.result_pad = {pad!r}: 0 to {MAX_PAD}")
    return str(spec.get("goal", "")), items, pace / 1000.0, pad


def read_checkpoint(cp):
    """The state between steps, read strictly: None on the first step."""
    if cp is None:
        return None
    if cp.schema != SCHEMA:
        raise BadSpec(f"checkpoint schema {cp.schema!r}: this build reads {SCHEMA}")
    state = json.loads(cp.payload)
    if not isinstance(state.get("done"), int) or not isinstance(state.get("plan"), str):
        raise BadSpec("checkpoint: done and plan are required")
    return state


def checkpoint(state) -> th.Checkpoint:
    return th.Checkpoint(SCHEMA, json.dumps(state, sort_keys=True).encode())


class Notes:
    def describe(self):
        return th.Description(kind=KIND, version="1.0.0", checkpoint_schemas=[SCHEMA],
                              capabilities=["model", "tools"],
                              runtime={"python": sys.version.split()[0]})

    def step(self, ctx: th.StepContext, host: th.Host, req: th.StepRequest) -> th.StepResult:
        try:
            goal, items, pace, pad = read_spec(req.spec)
            state = read_checkpoint(req.checkpoint)
        except (ValueError, KeyError) as e:
            return th.fail("bad_spec", str(e))
        if pace and ctx.wait(pace):
            raise th.Cancelled("cancelled while pacing")
        if state is None:
            return self.plan(host, goal, items)
        return self.write(host, req, items, state, pad)

    def plan(self, host, goal, items):
        """Step 1: one model call for a plan."""
        try:
            reply = host.call_model(th.ModelRequest(messages=[
                th.Message("system", "You plan notes. Reply with one line."),
                th.Message("user", f"Goal: {goal}\nItems: {', '.join(items)}"),
            ]))
            plan = reply.message.content[:MAX_ITEM_CHARS]
        except th.HostError as e:
            if e.kind != th.UNIMPLEMENTED:
                raise
            plan = "(no model on this host)"
        host.progress(f"planned {len(items)} notes")
        return th.continue_(f"planned: {plan}", checkpoint({"done": 0, "plan": plan, "files": []}))

    def write(self, host, req, items, state, pad):
        """Each later step: one tool call writes the next item's note."""
        i = state["done"]
        if i >= len(items):
            return th.fail("no_progress", f"checkpoint says {i} of {len(items)} notes are done")
        path = f"notes/{i + 1:02d}.md"
        res = host.call_tool(th.ToolRequest(
            name="workspace.write",
            arguments=json.dumps({"path": path, "content": f"# {items[i]}\n\nplan: {state['plan']}\n"}),
            idempotency_key=f"{KIND}/{req.task_id}/note/{i + 1}", idempotent=True))
        if res.is_error:
            return th.fail("tool_failed", f"workspace.write {path}: {res.result[:500]}")
        state = {"done": i + 1, "plan": state["plan"], "files": state["files"] + [path]}
        if state["done"] < len(items):
            return th.continue_(f"wrote {path}", checkpoint(state))
        result = {"notes": state["files"], "plan": state["plan"]}
        if pad:
            result["pad"] = "x" * pad
        return th.complete(f"wrote {len(items)} notes", json.dumps(result).encode(), checkpoint(state))


if __name__ == "__main__":
    th.serve(Notes())
