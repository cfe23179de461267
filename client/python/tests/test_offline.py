"""Tests that need no TaskPilots server: webhook signatures and the retry policy."""

from __future__ import annotations

import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Tuple

import taskpilots
from taskpilots import webhooks

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
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.client = taskpilots.Client(f"http://127.0.0.1:{self.srv.server_port}", "t", backoff=0.01, max_backoff=0.05)

    def tearDown(self) -> None:
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
        c = taskpilots.Client(self.client.base_url, "t", max_retries=2, backoff=0.01)
        with self.assertRaises(taskpilots.ServerError):
            c.get_session("ses_1")
        self.assertEqual(len(self.srv.seen), 3)  # type: ignore[attr-defined]

    def test_connection_error_is_transport_error(self) -> None:
        c = taskpilots.Client("http://127.0.0.1:1", "t", max_retries=1, backoff=0.01)
        with self.assertRaises(taskpilots.TransportError):
            c.get_session("ses_1")


if __name__ == "__main__":
    unittest.main()
