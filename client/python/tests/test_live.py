"""Tests against a real TaskPilots server.

Set TASKPILOTS_URL, TASKPILOTS_ADMIN_TOKEN, TASKPILOTS_CONTROLLER_TOKEN and
TASKPILOTS_WORKER_TOKEN (the Go test cmd/taskpilots/sdk_test.go starts a
server on PostgreSQL and does). Without them the tests are skipped, unless
TASKPILOTS_SDK_REQUIRE_SERVER=1, which makes the skip a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List

import taskpilots

URL = os.environ.get("TASKPILOTS_URL", "")
TOKENS = {r: os.environ.get(f"TASKPILOTS_{r.upper()}_TOKEN", "") for r in ("admin", "controller", "worker")}


def setUpModule() -> None:
    if not URL or not all(TOKENS.values()):
        if os.environ.get("TASKPILOTS_SDK_REQUIRE_SERVER") == "1":
            raise RuntimeError("TASKPILOTS_URL and the three TASKPILOTS_*_TOKEN variables are required")
        raise unittest.SkipTest("no server: set TASKPILOTS_URL and TASKPILOTS_{ADMIN,CONTROLLER,WORKER}_TOKEN")


# Workers that print "leased" when their handler starts, then take a while.
SIGTERM_WORKERS = {
    "Worker": """
import os, sys, time, taskpilots
def handle(lease):
    print("leased", flush=True)
    time.sleep(1.5)
    return {"result_type": "completed", "evidence": [{"claim": "finished after SIGTERM"}]}
with taskpilots.Client(os.environ["TASKPILOTS_URL"], os.environ["TASKPILOTS_WORKER_TOKEN"]) as c:
    print("handled", taskpilots.Worker(c, queue=sys.argv[1], handler=handle, wait_seconds=5).run(), flush=True)
""",
    "AsyncWorker": """
import asyncio, os, sys, taskpilots
async def handle(lease):
    print("leased", flush=True)
    await asyncio.sleep(1.5)
    return {"result_type": "completed", "evidence": [{"claim": "finished after SIGTERM"}]}
async def main():
    async with taskpilots.AsyncClient(os.environ["TASKPILOTS_URL"], os.environ["TASKPILOTS_WORKER_TOKEN"]) as c:
        print("handled", await taskpilots.AsyncWorker(c, queue=sys.argv[1], handler=handle, wait_seconds=5).run(), flush=True)
asyncio.run(main())
""",
}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class LiveTest(unittest.TestCase):
    def setUp(self) -> None:
        self.ctl = taskpilots.Client(URL, TOKENS["controller"])
        self.wrk = taskpilots.Client(URL, TOKENS["worker"])
        self.adm = taskpilots.Client(URL, TOKENS["admin"])
        for c in (self.ctl, self.wrk, self.adm):
            self.addCleanup(c.close)
        self.queue = uniq("py")

    def new_session(self, **kw: Any) -> Dict[str, Any]:
        return self.ctl.create_session(kw.pop("goal", "Refund order 1182 if eligible"), ticket_ref=kw.pop("ticket_ref", uniq("T")),
                                       constraints=["refunds over 200 EUR need a human"], **kw)

    def test_lifecycle(self) -> None:
        s = self.new_session(facts={"order_total": "240 EUR"})
        self.assertEqual(s["status"], "open")
        d = self.ctl.delegate(s["session_id"], queue=self.queue, step="check-eligibility", expected_version=s["state_version"],
                              instructions="check the order", lease_seconds=2)
        self.assertEqual(d["status"], "queued")

        # The handler outlives the 2 s lease: only the background heartbeats keep it.
        def check(lease: taskpilots.Lease) -> Dict[str, Any]:
            self.assertEqual(lease.packet["goal"], "Refund order 1182 if eligible")
            self.assertEqual(lease.step, "check-eligibility")
            time.sleep(3.5)
            self.assertFalse(lease.lost.is_set())
            return {"result_type": "completed", "output": {"eligible": True},
                    "evidence": [{"claim": "order paid", "source": "orders-db:1182"}], "next_step": "issue-refund"}

        w = taskpilots.Worker(self.wrk, queue=self.queue, handler=check, name="py-w1", wait_seconds=5)
        self.assertEqual(w.run(max_leases=1, handle_signals=False), 1)
        out = w.outcomes[0]
        self.assertIsNone(out.error, out.error)
        self.assertEqual(out.result["lease_token"], out.lease.lease_token)
        got = self.ctl.get_session(s["session_id"])
        self.assertEqual(got["status"], "open")  # next_step has no route: stalled, open
        self.assertIn("check-eligibility", json.dumps(got["state"]["completed_steps"]))

        # needs_input → input answered (re-delegated in the same call) → lease again.
        d2 = self.ctl.delegate(s["session_id"], queue=self.queue, step="issue-refund", expected_version=got["state_version"])
        w2 = taskpilots.Worker(self.wrk, queue=self.queue, name="py-w2", wait_seconds=5,
                               handler=lambda l: {"result_type": "needs_input", "question": "Refund to card or voucher?"})
        w2.run(max_leases=1, handle_signals=False)
        self.assertIsNone(w2.outcomes[0].error)
        self.assertEqual(w2.outcomes[0].answer["status"], "awaiting_input")
        got = self.ctl.get_session(s["session_id"])
        ans = self.ctl.provide_input(s["session_id"], expected_version=got["state_version"], answer="voucher",
                                     delegate={"queue": self.queue, "step": "issue-refund"})
        self.assertEqual(ans["status"], "queued")
        lease = self.wrk.lease(self.queue, worker="py-w3", wait_seconds=5)
        self.assertIsNotNone(lease)
        assert lease is not None
        self.assertEqual(lease["session_id"], s["session_id"])
        self.assertEqual(lease["packet"]["run_reason"]["kind"], "after_input")
        self.assertIn("voucher", json.dumps(lease["packet"]))
        hb = self.wrk.heartbeat(lease["delegation_id"], lease["lease_token"])
        self.assertIn("lease_expires_at", hb)
        res = self.wrk.submit_result(lease["delegation_id"], {
            "lease_token": lease["lease_token"], "session_id": s["session_id"], "step": "issue-refund",
            "result_type": "completed", "output": {"refunded": "voucher"}, "evidence": [{"claim": "voucher issued"}]})
        self.assertGreater(res["state_version"], ans["state_version"])
        self.assertNotEqual(d2["delegation_id"], lease["delegation_id"])

    def test_sigterm_finishes_the_current_lease(self) -> None:
        # A worker process gets SIGTERM while its handler runs: the handler
        # finishes, its result is sent, and run() returns (exit 0).
        for kind, script in SIGTERM_WORKERS.items():
            with self.subTest(kind):
                s = self.new_session()
                queue = uniq("py-term")
                self.ctl.delegate(s["session_id"], queue=queue, step="finish-me", expected_version=s["state_version"])
                p = subprocess.Popen([sys.executable, "-c", script, queue], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
                try:
                    assert p.stdout is not None
                    self.assertEqual(p.stdout.readline().strip(), "leased")
                    p.send_signal(signal.SIGTERM)
                    out, _ = p.communicate(timeout=60)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                self.assertEqual(p.returncode, 0, out)
                self.assertIn("handled 1", out)
                got = self.ctl.get_session(s["session_id"])
                self.assertIn("finish-me", json.dumps(got["state"]["completed_steps"]), out)

    def test_stale_write_is_conflict_with_current_version(self) -> None:
        s = self.new_session()
        d = self.ctl.delegate(s["session_id"], queue=self.queue, step="a", expected_version=s["state_version"])
        with self.assertRaises(taskpilots.ConflictError) as cm:
            self.ctl.cancel(s["session_id"], s["state_version"], reason="stale")
        self.assertEqual(cm.exception.status, 409)
        self.assertEqual(cm.exception.current_version, d["state_version"])
        self.ctl.cancel(s["session_id"], cm.exception.current_version, reason="fresh")

    def test_validation_lists_fields(self) -> None:
        s = self.new_session()
        with self.assertRaises(taskpilots.ValidationError) as cm:
            self.ctl.delegate(s["session_id"], queue=self.queue, step="a", expected_version=s["state_version"],
                              lease_seconds=0, max_attempts=99)
        self.assertEqual(cm.exception.status, 422)
        self.assertIn("lease_seconds", cm.exception.fields)
        self.assertIn("max_attempts", cm.exception.fields)
        with self.assertRaises(taskpilots.NotFoundError):
            self.ctl.get_session("ses_doesnotexist")
        with self.assertRaises(taskpilots.PermissionDeniedError):
            self.wrk.create_session("workers may not create sessions")

    def test_fenced_late_result(self) -> None:
        s = self.new_session()
        self.ctl.delegate(s["session_id"], queue=self.queue, step="slow", expected_version=s["state_version"], lease_seconds=1)
        first = self.wrk.lease(self.queue, worker="py-slow", wait_seconds=5)
        assert first is not None
        # No heartbeat: the lease expires and the delegation is leased again.
        second = None
        deadline = time.monotonic() + 20
        while second is None and time.monotonic() < deadline:
            second = self.wrk.lease(self.queue, worker="py-fast", wait_seconds=2)
        assert second is not None, "the expired lease was never offered again"
        self.assertEqual(second["attempt"], 2)
        body = {"session_id": s["session_id"], "step": "slow", "result_type": "completed", "evidence": [{"claim": "c"}]}
        with self.assertRaises(taskpilots.ConflictError):
            self.wrk.submit_result(first["delegation_id"], dict(body, lease_token=first["lease_token"]))
        with self.assertRaises(taskpilots.ConflictError):
            self.wrk.heartbeat(first["delegation_id"], first["lease_token"])
        self.wrk.submit_result(second["delegation_id"], dict(body, lease_token=second["lease_token"]))

    def test_schedule_snooze_notes_packet_routes_metrics(self) -> None:
        s = self.new_session(goal="Scheduled refund check")
        d = self.ctl.delegate(s["session_id"], queue=self.queue, step="later", expected_version=s["state_version"], delay_seconds=3600)
        self.assertIsNone(self.wrk.lease(self.queue, worker="py-early", wait_seconds=0))
        available_at = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        s2 = self.new_session()
        self.ctl.delegate(s2["session_id"], queue=self.queue, step="later", expected_version=s2["state_version"], available_at=available_at)
        self.assertIsNone(self.wrk.lease(self.queue, worker="py-early", wait_seconds=0))

        self.ctl.add_note(s["session_id"], "customer is a VIP", evidence={"claim": "CRM tier", "source": "crm"})
        packet = self.wrk.get_packet(s["session_id"])
        self.assertIn("customer is a VIP", json.dumps(packet["notes"]))
        prompt = self.wrk.get_packet_prompt(s["session_id"])
        self.assertGreater(prompt.prefix_bytes, 0)
        self.assertEqual(hashlib.sha256(prompt.text.encode()[: prompt.prefix_bytes]).hexdigest(), prompt.prefix_hash)
        self.assertIn("Scheduled refund check", prompt.prefix)

        until = (datetime.now(timezone.utc) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        cur = self.ctl.get_session(s["session_id"])
        snoozed = self.ctl.snooze(s["session_id"], cur["state_version"], until, reason="wait for the bank")
        self.assertEqual(snoozed["status"], "paused")
        self.assertGreater(snoozed["state_version"], d["state_version"])

        step = uniq("route")
        r = self.ctl.put_route(step, queue=self.queue, instructions="route me")
        self.assertEqual(r["queue"], self.queue)
        self.assertEqual(self.ctl.get_route(step)["step"], step)
        self.assertIn(step, json.dumps(self.ctl.list_routes()))
        self.ctl.delete_route(step)
        with self.assertRaises(taskpilots.NotFoundError):
            self.ctl.get_route(step)
        m = self.ctl.metrics(window="24h")
        self.assertIsInstance(m, dict)
        with self.assertRaises(taskpilots.ValidationError):
            self.ctl.metrics(window="1y")

    def test_list_paging(self) -> None:
        word = "pg" + uuid.uuid4().hex[:10]
        ids = {self.new_session(goal=f"Paging check {word} {i}")["session_id"] for i in range(5)}
        page = self.ctl.list_sessions(q=word, limit=2)
        self.assertEqual(len(page["sessions"]), 2)
        self.assertTrue(page["next_cursor"])
        seen = [x["session_id"] for x in self.ctl.iter_sessions(q=word, limit=2)]
        self.assertEqual(len(seen), 5)
        self.assertEqual(set(seen), ids)
        with self.assertRaises(taskpilots.ValidationError) as cm:
            self.ctl.list_sessions(limit=501)
        self.assertIn("limit", cm.exception.fields)

    def test_bulk_cancel_by_filter_skips_closed(self) -> None:
        word = "bk" + uuid.uuid4().hex[:10]
        ids = [self.new_session(goal=f"Bulk check {word} {i}")["session_id"] for i in range(3)]
        done = self.ctl.get_session(ids[0])
        self.ctl.cancel(ids[0], done["state_version"], reason="first")
        dry = self.ctl.bulk("cancel", filter={"q": word}, reason="cleanup", dry_run=True)
        self.assertEqual(dry["matched"], 3)  # a dry run lists what it would apply, and writes nothing
        self.assertEqual(sorted(dry["applied"]), sorted(ids[1:]))
        self.assertEqual(self.ctl.get_session(ids[1])["status"], "open")
        res = self.ctl.bulk("cancel", session_ids=ids, reason="cleanup")
        self.assertEqual(sorted(res["applied"]), sorted(ids[1:]))
        self.assertEqual([x["session_id"] for x in res["skipped"]], [ids[0]])
        with self.assertRaises(taskpilots.ValidationError) as cm:
            self.ctl.bulk("explode", session_ids=ids, reason="x")
        self.assertIn("action", cm.exception.fields)

    def test_lease_batch(self) -> None:
        sessions = [self.new_session() for _ in range(3)]
        for s in sessions:
            self.ctl.delegate(s["session_id"], queue=self.queue, step="triage", expected_version=s["state_version"])
        leases = self.wrk.lease_batch(self.queue, worker="py-batch", max=5)
        self.assertEqual(sorted(x["session_id"] for x in leases), sorted(s["session_id"] for s in sessions))
        self.assertEqual(len({x["lease_token"] for x in leases}), 3)  # each lease is one of its own
        # The results in one batch, one of them fenced (a token it never held):
        # that one gets its own 409, the others commit.
        items: List[Any] = [{
            "delegation_id": x["delegation_id"], "idempotency_key": uuid.uuid4().hex, "lease_token": x["lease_token"],
            "session_id": x["session_id"], "step": "triage", "result_type": "completed", "output": {"ok": True},
            "evidence": [{"claim": "triaged"}]} for x in leases]
        items[1] = dict(items[1], lease_token="lt_not_mine", idempotency_key=uuid.uuid4().hex)
        answer = self.wrk.submit_results(items)
        self.assertEqual([e["status"] for e in answer], [200, 409, 200])
        self.assertIn("lease", answer[1]["problem"]["detail"])
        self.assertEqual(self.ctl.get_session(leases[0]["session_id"])["status"], "completed")
        self.assertEqual(self.ctl.get_session(leases[1]["session_id"])["status"], "running")
        again = self.wrk.submit_results([items[0], dict(items[1], lease_token=leases[1]["lease_token"])])
        self.assertEqual([e["status"] for e in again], [200, 200])
        self.assertTrue(again[0].get("replayed"))  # same key: the first outcome, nothing written
        with self.assertRaises(taskpilots.ValidationError) as cm:
            self.wrk.submit_results([])
        self.assertIn("results", cm.exception.fields)
        self.assertEqual(self.wrk.lease_batch(self.queue, worker="py-batch", max=5), [])
        with self.assertRaises(taskpilots.ValidationError) as cm:
            self.wrk.lease_batch(self.queue, worker="py-batch", max=0)
        self.assertIn("max", cm.exception.fields)

    def test_feed_follows_cursor(self) -> None:
        start = self.ctl.events(after="now")["next_cursor"]
        s = self.new_session()
        self.ctl.delegate(s["session_id"], queue=self.queue, step="a", expected_version=s["state_version"])
        feed = self.ctl.feed(after=start, session_id=s["session_id"], limit=1, wait_seconds=2)
        types: List[str] = []
        deadline = time.monotonic() + 20
        for ev in feed:
            types.append(ev["type"])
            if "delegation.created" in types or time.monotonic() > deadline:
                feed.close()
        self.assertEqual(types[:2], ["session.created", "delegation.created"])
        self.assertNotEqual(feed.cursor, start)
        # Nothing new after the cursor: an idle feed ends its long poll empty.
        rest = list(self.ctl.feed(after=feed.cursor, session_id=s["session_id"], wait_seconds=1, stop_when_idle=True))
        self.assertEqual(rest, [])

    def test_idempotent_retry_reuses_key(self) -> None:
        # A proxy forwards the first create to the server and then answers
        # 503, as if the answer was lost: the retry must carry the same key
        # and get the first answer back, not a second session.
        seen: List[str] = []
        upstream = URL.rstrip("/")

        class Proxy(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append(self.headers.get("Idempotency-Key") or "")
                req = urllib.request.Request(upstream + self.path, data=body, method="POST", headers={
                    "Authorization": self.headers["Authorization"], "Content-Type": "application/json",
                    "Idempotency-Key": self.headers.get("Idempotency-Key") or ""})
                with urllib.request.urlopen(req) as resp:
                    status, data = resp.status, resp.read()
                retry_after = None
                if len(seen) == 1:
                    status, data, retry_after = 503, b'{"title":"Service Unavailable","status":503}', "0"
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        try:
            ref = uniq("T-retry")
            with taskpilots.Client(f"http://127.0.0.1:{srv.server_port}", TOKENS["controller"], backoff=0.05) as c:
                got = c.create_session("retried create", ticket_ref=ref)
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertEqual(len(seen), 2)
        self.assertEqual(seen[0], seen[1])
        listed = self.ctl.list_sessions(ticket_ref=ref)["sessions"]
        self.assertEqual([x["session_id"] for x in listed], [got["session_id"]])

    def test_webhook_signature(self) -> None:
        got: List[Dict[str, Any]] = []
        arrived = threading.Event()

        class Receiver(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got.append({"headers": dict(self.headers.items()), "body": body})
                self.send_response(204)
                self.end_headers()
                arrived.set()

            def log_message(self, *args: object) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        hook = self.adm.create_webhook(f"http://127.0.0.1:{srv.server_port}/hook", types=["session.created"], description="py sdk test")
        try:
            self.assertTrue(hook["secret"].startswith("whsec_"))
            s = self.new_session()
            deadline = time.monotonic() + 30
            mine = None
            while mine is None and time.monotonic() < deadline:
                arrived.wait(1)
                arrived.clear()
                for d in list(got):
                    if json.loads(d["body"])["session_id"] == s["session_id"]:
                        mine = d
            self.assertIsNotNone(mine, "no delivery within 30 s")
            assert mine is not None
            payload = taskpilots.verify_webhook(hook["secret"], mine["body"], mine["headers"])
            self.assertEqual(payload["type"], "session.created")
            self.assertEqual(payload["event_id"], mine["headers"].get("webhook-id") or mine["headers"].get("Webhook-Id"))
            with self.assertRaises(taskpilots.WebhookVerificationError):
                taskpilots.verify_webhook(hook["secret"], mine["body"] + b" ", mine["headers"])
            other = self.adm.create_webhook("http://127.0.0.1:9/unused")
            self.adm.delete_webhook(other["id"])
            with self.assertRaises(taskpilots.WebhookVerificationError):
                taskpilots.verify_webhook(other["secret"], mine["body"], mine["headers"])
        finally:
            self.adm.delete_webhook(hook["id"])
            srv.shutdown()
            srv.server_close()


if __name__ == "__main__":
    unittest.main()
