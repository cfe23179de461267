"""Tests that need no TaskPilots server: webhook signatures, the retry policy of both clients, generated code."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import os
import shutil
import subprocess
import threading
import time
import unittest
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any, List, Tuple

import taskpilots
from taskpilots import webhooks
from taskpilots._base import Settings, parse_retry_after

PY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(PY_DIR))
# The standardwebhooks npm package, installed by `make npm-deps` for the
# server's own webhook tests.
NPM_WEBHOOKS = os.path.join(REPO, "web", "testdata", "webhooks-verify")
REQUIRE = os.environ.get("TASKPILOTS_SDK_REQUIRE_SERVER") == "1"

# Produced by the standardwebhooks npm package (Webhook.sign), an
# implementation independent of this one.
VECTOR = {
    "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "id": "evt_01",
    "ts": 1764504000,
    "body": '{"event_id":"evt_01","type":"session.created","session_id":"ses_01","seq":1,'
    '"state_version":1,"created_at":"2026-11-30T12:00:00Z","payload":{"goal":"x"}}',
    "sig": "v1,bERyfkjZqVvGLsUyNubYkT4EWxkz4X1RGqLNQxb8cmQ=",
}


class WebhookVectorTest(unittest.TestCase):
    def headers(self, sig: str = VECTOR["sig"]) -> dict:
        return {"Webhook-Id": VECTOR["id"], "Webhook-Timestamp": str(VECTOR["ts"]), "Webhook-Signature": sig}

    def test_sign_matches_reference(self) -> None:
        self.assertEqual(webhooks.sign(VECTOR["secret"], VECTOR["id"], VECTOR["ts"], VECTOR["body"]), VECTOR["sig"])

    def test_verify(self) -> None:
        got = taskpilots.verify_webhook(VECTOR["secret"], VECTOR["body"].encode(), self.headers(), now=VECTOR["ts"] + 10)
        self.assertEqual(got["event_id"], "evt_01")
        # During a secret rotation the header carries several signatures.
        got = taskpilots.verify_webhook(VECTOR["secret"], VECTOR["body"], self.headers("v1,AAAA " + VECTOR["sig"]), now=VECTOR["ts"])
        self.assertEqual(got["type"], "session.created")

    def test_reject(self) -> None:
        cases = {
            "tampered body": (VECTOR["secret"], VECTOR["body"].replace("x", "y"), self.headers(), VECTOR["ts"]),
            "other secret": ("whsec_" + "QUJD" * 8, VECTOR["body"], self.headers(), VECTOR["ts"]),
            "old timestamp": (VECTOR["secret"], VECTOR["body"], self.headers(), VECTOR["ts"] + 3600),
            "no signature": (VECTOR["secret"], VECTOR["body"], {"webhook-id": "evt_01", "webhook-timestamp": "1"}, 1),
        }
        for name, (secret, body, headers, now) in cases.items():
            with self.subTest(name), self.assertRaises(taskpilots.WebhookVerificationError):
                taskpilots.verify_webhook(secret, body, headers, now=now)


# Reads {"verify": [{secret, headers, body}], "sign": [{secret, id, ts, body}]}
# on stdin; answers {"verified": [true|"error"...], "signed": ["v1,..."]}.
NODE_SCRIPT = r"""
const { Webhook } = require(process.argv[1] + "/node_modules/standardwebhooks");
let input = "";
process.stdin.on("data", (c) => (input += c)).on("end", () => {
  const req = JSON.parse(input);
  const verified = req.verify.map((c) => {
    try { new Webhook(c.secret).verify(c.body, c.headers); return true; } catch (e) { return String(e.message || e); }
  });
  const signed = req.sign.map((c) => new Webhook(c.secret).sign(c.id, new Date(c.ts * 1000), c.body));
  process.stdout.write(JSON.stringify({ verified, signed }));
});
"""


class WebhookInteropTest(unittest.TestCase):
    """Our signatures against the standardwebhooks npm package, both ways, on fresh random messages."""

    def test_against_npm_standardwebhooks(self) -> None:
        node = shutil.which("node")
        if node is None or not os.path.isdir(os.path.join(NPM_WEBHOOKS, "node_modules", "standardwebhooks")):
            msg = "node and web/testdata/webhooks-verify/node_modules (make npm-deps) are needed"
            if REQUIRE:
                self.fail(msg)
            self.skipTest(msg)
        now = int(time.time())
        msgs = []
        for i, body in enumerate(['{"a":1}', '{"goal":"Rückerstattung für Bestellung 1182 ✓"}', "", '{"big":"' + "x" * 5000 + '"}']):
            secret = "whsec_" + base64.b64encode(os.urandom(24 + 8 * (i % 2))).decode()
            msgs.append({"secret": secret, "id": "evt_" + uuid.uuid4().hex, "ts": now - i, "body": body})
        ours = [{"secret": m["secret"], "body": m["body"], "headers": {
            "webhook-id": m["id"], "webhook-timestamp": str(m["ts"]),
            "webhook-signature": webhooks.sign(m["secret"], m["id"], m["ts"], m["body"])}} for m in msgs]
        tampered = [dict(c, body=c["body"] + "!") for c in ours]
        req = {"verify": ours + tampered, "sign": msgs}
        out = subprocess.run([node, "-e", NODE_SCRIPT, NPM_WEBHOOKS], input=json.dumps(req), capture_output=True,
                             text=True, timeout=60, check=True)
        got = json.loads(out.stdout)
        self.assertEqual(got["verified"][: len(ours)], [True] * len(ours), "the npm package rejects our signatures")
        self.assertTrue(all(v is not True for v in got["verified"][len(ours):]), "the npm package accepts tampered bodies")
        for m, sig in zip(msgs, got["signed"]):
            headers = {"webhook-id": m["id"], "webhook-timestamp": str(m["ts"]), "webhook-signature": sig}
            with self.subTest(body=m["body"][:20]):
                self.assertEqual(sig, webhooks.sign(m["secret"], m["id"], m["ts"], m["body"]))
                if m["body"]:
                    taskpilots.verify_webhook(m["secret"], m["body"].encode(), headers)
                with self.assertRaises(taskpilots.WebhookVerificationError):
                    taskpilots.verify_webhook(m["secret"], m["body"] + " ", headers)


class LeaseTimeTest(unittest.TestCase):
    def test_rfc3339_variants(self) -> None:
        # Python 3.9's fromisoformat rejects these unless normalised; a
        # parse failure would make the worker assume a 30 s lease and
        # heartbeat too late for short leases.
        from taskpilots.worker import _seconds_left

        for ts in ["2099-11-30T19:50:00.123456789Z", "2099-11-30T19:50:00Z", "2099-11-30T19:50:00.5+00:00"]:
            with self.subTest(ts):
                self.assertGreater(_seconds_left(ts), 0)
        self.assertLess(_seconds_left("2000-01-01T00:00:00.1Z"), 0)


class _Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, body) of the server's script."""

    def _serve(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        srv = self.server
        with srv.lock:  # type: ignore[attr-defined]
            srv.seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))  # type: ignore[attr-defined]
            status, body = srv.script.pop(0) if srv.script else (200, {})  # type: ignore[attr-defined]
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/problem+json" if status >= 400 else "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 503:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, *args: object) -> None:
        pass


class RetryPolicyTest(unittest.TestCase):
    def setUp(self) -> None:
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        self.srv.lock = threading.Lock()  # type: ignore[attr-defined]
        self.srv.seen: List[Tuple[str, str, str]] = []  # type: ignore[attr-defined]
        self.srv.script = []  # type: ignore[attr-defined]
        threading.Thread(target=self.srv.serve_forever, args=(0.05,), daemon=True).start()
        self.client = taskpilots.Client(f"http://127.0.0.1:{self.srv.server_port}", "t", backoff=0.01, max_backoff=0.05)

    def tearDown(self) -> None:
        self.client.close()
        self.srv.shutdown()
        self.srv.server_close()

    def test_5xx_retried_with_the_same_key(self) -> None:
        self.srv.script = [(503, {"title": "unavailable", "status": 503}), (502, {}), (201, {"session_id": "ses_1"})]  # type: ignore[attr-defined]
        got = self.client.create_session("g")
        self.assertEqual(got["session_id"], "ses_1")
        keys = [k for _, _, k in self.srv.seen]  # type: ignore[attr-defined]
        self.assertEqual(len(keys), 3)
        self.assertTrue(keys[0])
        self.assertEqual(len(set(keys)), 1, "every retry must resend the call's idempotency key")
        # The next call has its own key.
        self.client.create_session("g2")
        self.assertNotEqual(self.srv.seen[-1][2], keys[0])  # type: ignore[attr-defined]

    def test_4xx_never_retried(self) -> None:
        for status, cls in [(409, taskpilots.ConflictError), (422, taskpilots.ValidationError), (429, taskpilots.APIError)]:
            self.srv.seen.clear()  # type: ignore[attr-defined]
            self.srv.script = [(status, {"title": "no", "status": status, "detail": "d", "current_version": 7,  # type: ignore[attr-defined]
                                          "errors": [{"field": "queue", "message": "required"}]})]
            with self.subTest(status), self.assertRaises(cls) as cm:
                self.client.delegate("ses_1", queue="q", step="s", expected_version=1)
            self.assertEqual(len(self.srv.seen), 1)  # type: ignore[attr-defined]
            self.assertEqual(cm.exception.status, status)
            self.assertEqual(cm.exception.current_version, 7)
            self.assertEqual(cm.exception.field("queue"), "required")

    def test_write_without_key_not_retried(self) -> None:
        self.srv.script = [(503, {"title": "unavailable", "status": 503})]  # type: ignore[attr-defined]
        with self.assertRaises(taskpilots.ServerError):
            self.client.request("POST", "/not-idempotent", body={})
        self.assertEqual(len(self.srv.seen), 1)  # type: ignore[attr-defined]
        self.assertIsNone(self.srv.seen[0][2])  # type: ignore[attr-defined]

    def test_webhook_writes_retried_with_their_key(self) -> None:
        self.srv.script = [(503, {"title": "unavailable", "status": 503}), (201, {"id": "whk_1", "secret": "whsec_x"})]  # type: ignore[attr-defined]
        got = self.client.create_webhook("http://example.invalid/hook", idempotency_key="hook-1")
        self.assertEqual(got["id"], "whk_1")
        self.assertEqual([k for _, _, k in self.srv.seen], ["hook-1", "hook-1"])  # type: ignore[attr-defined]

    def test_retries_give_up(self) -> None:
        self.srv.script = [(503, {"status": 503})] * 10  # type: ignore[attr-defined]
        with taskpilots.Client(self.client.base_url, "t", max_retries=2, backoff=0.01) as c:
            with self.assertRaises(taskpilots.ServerError):
                c.get_session("ses_1")
        self.assertEqual(len(self.srv.seen), 3)  # type: ignore[attr-defined]

    def test_connection_error_is_transport_error(self) -> None:
        with taskpilots.Client("http://127.0.0.1:1", "t", max_retries=1, backoff=0.01) as c:
            with self.assertRaises(taskpilots.TransportError):
                c.get_session("ses_1")


class AsyncRetryPolicyTest(unittest.IsolatedAsyncioTestCase):
    """The async twin follows the same policy (its code is the source of the sync client's)."""

    async def asyncSetUp(self) -> None:
        # The test loop runs in debug mode, which logs every step slower than
        # 0.1 s; building an httpx client's TLS context is one.
        asyncio.get_running_loop().slow_callback_duration = 5

    def setUp(self) -> None:
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        self.srv.lock = threading.Lock()  # type: ignore[attr-defined]
        self.srv.seen = []  # type: ignore[attr-defined]
        self.srv.script = []  # type: ignore[attr-defined]
        threading.Thread(target=self.srv.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_port}"

    def tearDown(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()

    async def test_503_retried_with_the_same_key(self) -> None:
        self.srv.script = [(503, {"status": 503}), (503, {"status": 503}), (201, {"session_id": "ses_1"})]  # type: ignore[attr-defined]
        async with taskpilots.AsyncClient(self.url, "t", backoff=0.01, max_backoff=0.05) as c:
            got = await c.create_session("g")
            self.assertEqual(got["session_id"], "ses_1")
            keys = [k for _, _, k in self.srv.seen]  # type: ignore[attr-defined]
            self.assertEqual(len(keys), 3)
            self.assertTrue(keys[0])
            self.assertEqual(len(set(keys)), 1, "every retry must resend the call's idempotency key")
            await c.create_session("g2")
            self.assertNotEqual(self.srv.seen[-1][2], keys[0])  # type: ignore[attr-defined]

    async def test_problem_json_mapped_and_never_retried(self) -> None:
        async with taskpilots.AsyncClient(self.url, "t", backoff=0.01) as c:
            for status, cls in [(409, taskpilots.ConflictError), (422, taskpilots.ValidationError)]:
                self.srv.seen.clear()  # type: ignore[attr-defined]
                self.srv.script = [(status, {"title": "no", "status": status, "current_version": 7,  # type: ignore[attr-defined]
                                              "errors": [{"field": "lease_seconds", "message": "must be 1..3600"}]})]
                with self.subTest(status), self.assertRaises(cls) as cm:
                    await c.delegate("ses_1", queue="q", step="s", expected_version=1)
                self.assertEqual(len(self.srv.seen), 1)  # type: ignore[attr-defined]
                self.assertEqual(cm.exception.current_version, 7)
                self.assertEqual(cm.exception.fields, ["lease_seconds"])

    async def test_connection_error_is_transport_error(self) -> None:
        async with taskpilots.AsyncClient("http://127.0.0.1:1", "t", max_retries=1, backoff=0.01) as c:
            with self.assertRaises(taskpilots.TransportError):
                await c.get_session("ses_1")


class RetryAfterTest(unittest.TestCase):
    """Retry-After sets the delay when it is longer than the backoff (no clock involved)."""

    def test_delay(self) -> None:
        s = Settings("http://x", "t", timeout=1, max_retries=3, backoff=0.1, max_backoff=5, user_agent="ua")
        err = taskpilots.ServerError("GET", "/x", 503)
        self.assertLessEqual(s.delay(0, err), 0.1)
        err.retry_after = 2.0
        self.assertEqual(s.delay(0, err), 2.0)
        err.retry_after = 3600.0  # capped: a server cannot park the client for an hour
        self.assertEqual(s.delay(0, err), 20.0)

    def test_parse(self) -> None:
        self.assertEqual(parse_retry_after("3"), 3.0)
        self.assertIsNone(parse_retry_after(""))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertEqual(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), 0.0)  # in the past

    def test_header_reaches_the_error(self) -> None:
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        srv.lock = threading.Lock()  # type: ignore[attr-defined]
        srv.seen = []  # type: ignore[attr-defined]
        srv.script = [(503, {"status": 503})]  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        try:
            with taskpilots.Client(f"http://127.0.0.1:{srv.server_port}", "t", max_retries=0) as c:
                with self.assertRaises(taskpilots.ServerError) as cm:
                    c.get_session("ses_1")
            self.assertEqual(cm.exception.retry_after, 0.0)
        finally:
            srv.shutdown()
            srv.server_close()


def _load(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(script, os.path.join(PY_DIR, "scripts", script + ".py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class GeneratedCodeTest(unittest.TestCase):
    """models.py and _client.py are generated and committed; they must match their sources."""

    def test_models_fresh(self) -> None:
        gen: Any = _load("gen_models")
        with open(gen.SPEC, encoding="utf-8") as f:
            want = gen.generate(json.load(f))
        with open(gen.OUT, encoding="utf-8") as f:
            self.assertEqual(f.read(), want, "run python3 client/python/scripts/gen_models.py")

    def test_sync_client_fresh(self) -> None:
        un: Any = _load("unasync")
        with open(un.SRC, encoding="utf-8") as f:
            want = un.convert(f.read())
        with open(un.OUT, encoding="utf-8") as f:
            self.assertEqual(f.read(), want, "run python3 client/python/scripts/unasync.py")

    def test_same_methods(self) -> None:
        public = lambda cls: {n for n in vars(cls) if not n.startswith("_")}  # noqa: E731
        self.assertEqual(public(taskpilots.Client) - {"close"}, public(taskpilots.AsyncClient) - {"aclose"})
        for name in ["create_session", "get_session", "delegate", "lease", "heartbeat", "submit_result",
                     "provide_input", "list_sessions", "events", "feed"]:
            self.assertTrue(callable(getattr(taskpilots.Client, name)), name)


if __name__ == "__main__":
    unittest.main()
