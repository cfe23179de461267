"""The async twin (AsyncClient, AsyncWorker, AsyncFeed) against a real TaskPilots server.

Same environment as test_live.py. A shorter suite than the sync one: both
clients run the same generated methods and retry policy (scripts/unasync.py),
so this covers what differs: awaiting, the heartbeat task, async iteration.
"""

from __future__ import annotations

import asyncio
import json
import time
import unittest
from typing import Any, Dict, List

import taskpilots

from .test_live import TOKENS, URL, setUpModule, uniq  # noqa: F401  (setUpModule: the same server check)


class AsyncLiveTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 5  # see test_offline.AsyncRetryPolicyTest
        self.ctl = taskpilots.AsyncClient(URL, TOKENS["controller"])
        self.wrk = taskpilots.AsyncClient(URL, TOKENS["worker"])
        self.queue = uniq("pya")

    async def asyncTearDown(self) -> None:
        await self.ctl.aclose()
        await self.wrk.aclose()

    async def new_session(self, goal: str = "Refund order 1182 if eligible") -> Dict[str, Any]:
        self.ticket_ref = uniq("T")
        return dict(await self.ctl.create_session(goal, ticket_ref=self.ticket_ref))

    async def test_lifecycle_with_worker(self) -> None:
        start = (await self.ctl.events(after="now"))["next_cursor"]
        s = await self.new_session()
        sid = s["session_id"]
        await self.ctl.delegate(sid, queue=self.queue, step="check-eligibility", expected_version=s["state_version"],
                                lease_seconds=2)

        # The handler outlives the 2 s lease: only the heartbeat task keeps it.
        async def check(lease: taskpilots.Lease) -> Dict[str, Any]:
            self.assertEqual(lease.packet["goal"], "Refund order 1182 if eligible")
            await asyncio.sleep(3.5)
            self.assertFalse(lease.lost.is_set())
            return {"result_type": "needs_input", "question": "Refund to card or voucher?"}

        w = taskpilots.AsyncWorker(self.wrk, queue=self.queue, handler=check, name="pya-w1", wait_seconds=5)
        self.assertEqual(await w.run(max_leases=1, handle_signals=False), 1)
        out = w.outcomes[0]
        self.assertIsNone(out.error, out.error)
        assert out.answer is not None
        self.assertEqual(out.answer["status"], "awaiting_input")

        got = await self.ctl.get_session(sid)
        ans = await self.ctl.provide_input(sid, expected_version=got["state_version"], answer="voucher",
                                           delegate={"queue": self.queue, "step": "check-eligibility"})
        self.assertEqual(ans["status"], "queued")
        w2 = taskpilots.AsyncWorker(self.wrk, queue=self.queue, name="pya-w2", wait_seconds=5, handler=lambda lease: {
            "result_type": "completed", "output": {"refund": "voucher"}, "evidence": [{"claim": "voucher issued"}]})
        await w2.run(max_leases=1, handle_signals=False)
        self.assertIsNone(w2.outcomes[0].error, w2.outcomes[0].error)
        self.assertEqual(w2.outcomes[0].lease.packet["run_reason"]["kind"], "after_input")

        types: List[str] = []
        feed = self.ctl.feed(after=start, session_id=sid, wait_seconds=2)
        deadline = time.monotonic() + 20
        async for ev in feed:
            types.append(ev["type"])
            if ev["type"] == "result.completed" or time.monotonic() > deadline:
                feed.close()
        self.assertEqual(types[0], "session.created")
        self.assertIn("result.needs_input", types)
        self.assertEqual(types[-1], "result.completed")
        self.assertNotEqual(feed.cursor, start)
        listed = [x async for x in self.ctl.iter_sessions(ticket_ref=self.ticket_ref)]
        self.assertEqual([x["session_id"] for x in listed], [sid])

    async def test_conflict_and_validation(self) -> None:
        s = await self.new_session()
        d = await self.ctl.delegate(s["session_id"], queue=self.queue, step="a", expected_version=s["state_version"])
        with self.assertRaises(taskpilots.ConflictError) as cm:
            await self.ctl.cancel(s["session_id"], s["state_version"], reason="stale")
        self.assertEqual(cm.exception.current_version, d["state_version"])
        with self.assertRaises(taskpilots.ValidationError) as vm:
            await self.ctl.delegate(s["session_id"], queue=self.queue, step="b", expected_version=d["state_version"],
                                    lease_seconds=0, max_attempts=99)
        self.assertIn("lease_seconds", vm.exception.fields)
        self.assertIn("max_attempts", vm.exception.fields)

    async def test_worker_surfaces_fencing(self) -> None:
        # The lease expires while the handler runs without heartbeats and
        # another worker takes the delegation: the late result is refused
        # (fenced) and the Outcome carries the ConflictError.
        s = await self.new_session()
        await self.ctl.delegate(s["session_id"], queue=self.queue, step="slow", expected_version=s["state_version"],
                                lease_seconds=1)
        second: Dict[str, Any] = {}

        async def slow(lease: taskpilots.Lease) -> Dict[str, Any]:
            deadline = time.monotonic() + 20
            while not second and time.monotonic() < deadline:
                got = await self.wrk.lease(self.queue, worker="pya-fast", wait_seconds=2)
                if got:
                    second.update(got)
            return {"result_type": "completed", "evidence": [{"claim": "late"}]}

        w = taskpilots.AsyncWorker(self.wrk, queue=self.queue, handler=slow, name="pya-slow", wait_seconds=5)
        # A worker that stalls (a paused VM, a blocked loop) sends no heartbeat: stand in for it.
        w._heartbeat = lambda lease: asyncio.sleep(3600)  # type: ignore[method-assign]
        await w.run(max_leases=1, handle_signals=False)
        self.assertTrue(second, "the expired lease was never offered again")
        self.assertEqual(second["attempt"], 2)
        err = w.outcomes[0].error
        self.assertIsInstance(err, (taskpilots.ConflictError, taskpilots.LeaseLost), err)
        self.assertIsNone(w.outcomes[0].answer)
        done = await self.wrk.submit_result(second["delegation_id"], {
            "lease_token": second["lease_token"], "session_id": s["session_id"], "step": "slow",
            "result_type": "completed", "evidence": [{"claim": "on time"}]})
        self.assertGreater(done["state_version"], 0)
        self.assertIn("on time", json.dumps((await self.ctl.get_session(s["session_id"]))["state"]))


if __name__ == "__main__":
    unittest.main()
