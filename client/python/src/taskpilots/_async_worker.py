"""The worker loop on the async client: lease, heartbeat in a task, submit the result with the fencing token.

It behaves as :class:`~taskpilots.Worker` does (see worker.py), with asyncio
tasks where that one uses threads: the handler is a coroutine function (a
plain function works too), the heartbeats run as a task beside it and are
cancelled when it returns.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Union

from ._async_client import AsyncClient
from .errors import ConflictError, NotFoundError, TaskPilotsError
from .worker import LEASE_ERROR_PAUSE, Lease, LeaseLost, Outcome, complete_result, failure_result, heartbeat_plan

__all__ = ["AsyncWorker"]

log = logging.getLogger("taskpilots.worker")

AsyncHandler = Callable[[Lease], Union[Awaitable[Mapping[str, Any]], Mapping[str, Any]]]


class AsyncWorker:
    """Leases from one queue and awaits ``handler`` on each delegation.

    Args:
        client: an :class:`~taskpilots.AsyncClient` with a worker (or admin) token.
        queue: the queue to lease from.
        handler: ``async handler(lease) -> dict`` returning the result
            contract's body; an exception becomes a ``failed`` result as in
            :class:`~taskpilots.Worker`.
        name: the worker name recorded on leases (default host-pid).
        wait_seconds: long-poll length of each lease call (≤ 30).
        heartbeat_fraction: heartbeat every this fraction of the lease length.
        on_result: called with an :class:`~taskpilots.Outcome` after each lease.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        queue: str,
        handler: AsyncHandler,
        name: Optional[str] = None,
        wait_seconds: int = 10,
        heartbeat_fraction: float = 1 / 3,
        on_result: Optional[Callable[[Outcome], None]] = None,
    ) -> None:
        self.client = client
        self.queue = queue
        self.handler = handler
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.wait_seconds = wait_seconds
        self.heartbeat_fraction = heartbeat_fraction if 0 < heartbeat_fraction < 1 else 1 / 3
        self.on_result = on_result
        self._stopping = False
        self.outcomes: List[Outcome] = []

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current lease call and handler."""
        self._stopping = True

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping

    async def run(self, max_leases: Optional[int] = None, *, handle_signals: bool = True) -> int:
        """Lease and handle until :meth:`stop` (or SIGTERM/SIGINT), or ``max_leases`` leases.

        A handler that is running when the stop comes finishes and its result
        is sent (graceful shutdown). Returns the number of leases handled.
        Signal handlers are installed only on the main thread's event loop.
        """
        restore = self._install_signals() if handle_signals else None
        handled = 0
        try:
            while not self._stopping and (max_leases is None or handled < max_leases):
                try:
                    got = await self.client.lease(self.queue, worker=self.name, wait_seconds=self.wait_seconds)
                except TaskPilotsError as e:
                    log.warning("lease failed: %s", e)
                    await asyncio.sleep(LEASE_ERROR_PAUSE)
                    continue
                if got is None:
                    continue
                await self.work(Lease.from_api(self.queue, got))
                handled += 1
        finally:
            if restore:
                restore()
        return handled

    def _install_signals(self) -> Optional[Callable[[], None]]:
        if threading.current_thread() is not threading.main_thread():
            return None
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGTERM, signal.SIGINT)

        def on_signal(signum: int) -> None:
            log.info("signal %d: finishing the current lease, then stopping", signum)
            self.stop()

        try:
            for s in sigs:
                loop.add_signal_handler(s, on_signal, s)
        except (NotImplementedError, RuntimeError):  # Windows event loops have no signal handlers
            return None

        def restore() -> None:
            for s in sigs:
                loop.remove_signal_handler(s)

        return restore

    async def work(self, lease: Lease) -> Outcome:
        """Await the handler on one lease with heartbeats and submit its result."""
        hb = asyncio.ensure_future(self._heartbeat(lease))
        result: Dict[str, Any]
        try:
            got = self.handler(lease)
            if inspect.isawaitable(got):
                got = await got
            result = dict(got)
        except Exception as e:  # the handler's failure becomes the contract's failure
            result = failure_result(e)
        finally:
            hb.cancel()
            await asyncio.gather(hb, return_exceptions=True)
        if lease.lost.is_set():
            log.warning("lease lost while working on %s; result dropped", lease.delegation_id)
            return self._report(Outcome(lease, result, None, LeaseLost(f"lease of {lease.delegation_id} lost")))
        complete_result(result, lease)
        try:
            answer = await self.client.submit_result(lease.delegation_id, result)
        except ConflictError as e:
            log.warning("result refused: the lease expired or was superseded: %s", e)
            return self._report(Outcome(lease, result, None, e))
        except TaskPilotsError as e:
            log.error("result not sent: %s", e)
            return self._report(Outcome(lease, result, None, e))
        return self._report(Outcome(lease, result, answer, None))

    def _report(self, o: Outcome) -> Outcome:
        self.outcomes.append(o)
        if self.on_result:
            self.on_result(o)
        return o

    async def _heartbeat(self, lease: Lease) -> None:
        length, every = heartbeat_plan(lease, self.heartbeat_fraction)
        expires = time.monotonic() + length
        while True:
            await asyncio.sleep(every)
            try:
                await self.client.heartbeat(lease.delegation_id, lease.lease_token)
                expires = time.monotonic() + length
            except (ConflictError, NotFoundError) as e:
                log.warning("heartbeat refused, lease lost: %s", e)
                lease.lost.set()
                return
            except TaskPilotsError as e:
                log.warning("heartbeat failed: %s", e)
                if time.monotonic() >= expires:
                    log.warning("lease ran out without a heartbeat")
                    lease.lost.set()
                    return
