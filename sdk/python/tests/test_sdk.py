"""Unit tests of the Python SDK's pure parts: the wire's conversions and
bounds, the error mapping, the description check, the example's spec.
Run by sdk/python/unit_test.go (go test), or:

    cd sdk/python && /usr/bin/python3 -m unittest discover -s tests
"""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import taskhost_executor as th  # noqa: E402
from taskhost_executor import _errors, _serve, _wire  # noqa: E402

import pynotes  # noqa: E402


class ErrorMapping(unittest.TestCase):
    def test_codes_and_reasons(self):
        cases = [
            (12, "", "", th.UNIMPLEMENTED),
            (7, "", "", th.PERMISSION_DENIED),
            (8, "tool calls: 0 left", "", th.BUDGET_EXHAUSTED),
            (8, "grpc: received message larger than max (5 vs. 4)", "", th.INVALID_ARGUMENT),
            (3, "", "", th.INVALID_ARGUMENT),
            (14, "", "MODEL_UNAVAILABLE", th.MODEL_UNAVAILABLE),
            (10, "", "MODEL_FAILED", th.MODEL_FAILED),
            (9, "", "EFFECT_UNSETTLED", th.EFFECT_UNSETTLED),
            (9, "the step is no longer running", "", th.HOST_UNAVAILABLE),
            (5, "unknown tool", "", th.HOST_UNAVAILABLE),
            (13, "", "", th.HOST_UNAVAILABLE),
            (0, "", "", th.HOST_UNAVAILABLE),
        ]
        for code, msg, reason, kind in cases:
            with self.subTest(code=code, reason=reason):
                e = _errors.error_from_wire("CallTool", code, msg, reason, {"kind": "x"})
                self.assertIsInstance(e, th.HostError)
                self.assertEqual(e.kind, kind)
                self.assertEqual(e.code, code)
                self.assertEqual(e.reason, reason)
                self.assertTrue(str(e).startswith(kind + ": CallTool: "))

    def test_cancelled(self):
        for code in (1, 4):
            self.assertIsInstance(_errors.error_from_wire("Progress", code, "", "", {}), th.Cancelled)


class Results(unittest.TestCase):
    def test_fail_message_bound(self):
        # 2000 bytes are kept, the 2001st is cut; a cut never splits a character.
        for n, want in ((2000, 2000), (2001, 2000)):
            m = _wire.step_result_to_pb(th.fail("r", "x" * n))
            self.assertEqual(len(m.fail.message.encode()), want)
        m = _wire.step_result_to_pb(th.fail("r", "x" * 1999 + "é"))
        self.assertEqual(m.fail.message, "x" * 1999)

    def test_not_a_result(self):
        for bad in (None, "done", th.StepResult("maybe")):
            m = _wire.step_result_to_pb(bad)
            self.assertEqual(m.WhichOneof("outcome"), "fail")
            self.assertEqual(m.fail.reason, "executor_failed")

    def test_outcomes(self):
        cp = th.Checkpoint("k/1", b"{}")
        m = _wire.step_result_to_pb(th.continue_("s", cp))
        self.assertEqual((m.WhichOneof("outcome"), getattr(m, "continue").checkpoint.schema), ("continue", "k/1"))
        m = _wire.step_result_to_pb(th.complete("s", b"r"))
        self.assertEqual((m.complete.result, m.complete.HasField("checkpoint")), (b"r", False))

    def test_oversized(self):
        # Over the 4 MiB message: named by its largest part.
        big = b"x" * (4 << 20)
        self.assertEqual(_serve._oversized(th.complete("s", big), len(big)).fail.reason, "result_too_large")
        r = th.continue_("s", th.Checkpoint("k/1", big))
        self.assertEqual(_serve._oversized(r, len(big)).fail.reason, "checkpoint_too_large")


class Describe(unittest.TestCase):
    def test_validate(self):
        ok = th.Description("k-1_x", "1", ["k/1"])
        _serve.validate_description(ok)
        for bad, word in ((th.Description("K", "1", ["k/1"]), "kind"), (th.Description("", "1", ["k/1"]), "kind"),
                          (th.Description("k", "", ["k/1"]), "version"), (th.Description("k", "1", []), "checkpoint_schemas")):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(ValueError, word):
                    _serve.validate_description(bad)

    def test_describe_to_pb(self):
        m = _wire.describe_to_pb(th.Description("k", "1", ["k/1"], ["tools"], {"python": "3"}))
        self.assertEqual((m.kind, m.protocol_version, list(m.checkpoint_schemas), dict(m.runtime)), ("k", 2, ["k/1"], {"python": "3"}))


class Handshake(unittest.TestCase):
    def run_serve(self, env):
        code = "import sys; sys.path.insert(0, %r); import taskhost_executor as th\n" \
               "class E:\n    def describe(self): return th.Description('k', '1', ['k/1'])\n" \
               "th.serve(E())\n" % os.path.dirname(HERE)
        return subprocess.run([sys.executable, "-B", "-c", code], env=env, capture_output=True, text=True, timeout=30)

    def test_no_cookie(self):
        r = self.run_serve({"PATH": "/usr/bin:/bin"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("not meant to be run directly", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_other_protocol(self):
        r = self.run_serve({"TASKHOST_EXECUTOR_PLUGIN": _wire.MAGIC_COOKIE_VALUE, "PLUGIN_PROTOCOL_VERSIONS": "1,3"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("speaks executor protocol 2 and the host speaks 1,3", r.stderr)

    def test_socket_path_bound(self):
        # plugin-PID.sock in a dir too long for a unix socket's 107 bytes.
        long_dir = "/" + "d" * 100
        r = self.run_serve({"TASKHOST_EXECUTOR_PLUGIN": _wire.MAGIC_COOKIE_VALUE, "PLUGIN_UNIX_SOCKET_DIR": long_dir})
        self.assertEqual(r.returncode, 1)
        self.assertIn("longer than a unix socket's 107 bytes", r.stderr)


class PynotesSpec(unittest.TestCase):
    def spec(self, **notes):
        import json
        return json.dumps({"goal": "g", "notes": notes}).encode()

    def test_bounds(self):
        ok = [dict(items=["x"] * 64), dict(items=["x" * 200]), dict(items=["x"], pace_ms=600000),
              dict(items=["x"], result_pad=1 << 20)]
        bad = [(dict(items=["x"] * 65), "notes.items"), (dict(items=["x" * 201]), r"notes.items\[0\]"),
               (dict(items=[""]), r"notes.items\[0\]"), (dict(items=["x"], pace_ms=600001), "pace_ms"),
               (dict(items=["x"], result_pad=(1 << 20) + 1), "result_pad"), (dict(items=["x"], pace_ms="1"), "pace_ms")]
        for n in ok:
            pynotes.read_spec(self.spec(**n))
        for n, field in bad:
            with self.subTest(notes=n):
                with self.assertRaisesRegex(pynotes.BadSpec, field):
                    pynotes.read_spec(self.spec(**n))

    def test_checkpoint_read_strictly(self):
        self.assertIsNone(pynotes.read_checkpoint(None))
        with self.assertRaisesRegex(pynotes.BadSpec, "schema"):
            pynotes.read_checkpoint(th.Checkpoint("pynotes/2", b"{}"))
        with self.assertRaisesRegex(pynotes.BadSpec, "required"):
            pynotes.read_checkpoint(th.Checkpoint("pynotes/1", b'{"done": "1", "plan": ""}'))


if __name__ == "__main__":
    unittest.main()
