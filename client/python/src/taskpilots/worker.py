"""A worker loop: lease, heartbeat in the background, submit the result with the fencing token.

The handler gets a :class:`Lease` (its packet included) and returns the body
of the result contract as a dict (``result_type``, ``output``, ``evidence``,
…); the worker adds ``lease_token``, ``session_id`` and ``step``. While the
handler runs, a thread renews the lease at a third of its length. When a
heartbeat is refused (the lease expired or was superseded) ``lease.lost`` is
set and the handler's result is dropped: another worker owns the delegation
now, and the server would refuse the stale token anyway.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ._client import Client
from .errors import ConflictError, NotFoundError, TaskPilotsError
from .models import SessionWritten

__all__ = ["Worker", "Lease", "Outcome", "LeaseLost", "PermanentFailure", "BadInputFailure"]

#: How long to wait before leasing again after a lease call failed (the server is down or restarting).
LEASE_ERROR_PAUSE = 1.0

log = logging.getLogger("taskpilots.worker")


class LeaseLost(TaskPilotsError):
    """The lease was lost while the handler ran; its result was not sent."""


class PermanentFailure(Exception):
    """Raise from a handler for a ``failed`` result of class ``permanent`` (no retry)."""


class BadInputFailure(Exception):
    """Raise from a handler for a ``failed`` result of class ``bad_input`` (the session awaits input)."""


@dataclass
class Lease:
    """A leased delegation, as handed to the handler."""

    delegation_id: str
    session_id: str
    step: str
    attempt: int
    lease_token: str
    lease_expires_at: str
    packet: Dict[str, Any]
    queue: str
    raw: Dict[str, Any] = field(repr=False)
    #: Set when the lease is lost (a heartbeat was refused): stop work early.
    lost: threading.Event = field(default_factory=threading.Event, repr=False)

    @classmethod
    def from_api(cls, queue: str, d: Mapping[str, Any]) -> "Lease":
        """Build a Lease from the lease operation's answer."""
        return cls(
            delegation_id=d["delegation_id"], session_id=d["session_id"], step=d["step"],
            attempt=int(d.get("attempt", 1)), lease_token=d["lease_token"],
            lease_expires_at=d["lease_expires_at"], packet=dict(d.get("packet") or {}),
            queue=d.get("queue") or queue, raw=dict(d),
        )


@dataclass
class Outcome:
    """What became of one lease: the result sent and the server's answer, or the error."""

    lease: Lease
    result: Optional[Dict[str, Any]]
    answer: Optional[SessionWritten]
    error: Optional[BaseException]


Handler = Callable[[Lease], Mapping[str, Any]]


def failure_result(e: BaseException) -> Dict[str, Any]:
    """The ``failed`` result contract for a handler's exception."""
    cls = "permanent" if isinstance(e, PermanentFailure) else "bad_input" if isinstance(e, BadInputFailure) else "transient"
    log.warning("handler failed (%s): %s", cls, e)
    return {"result_type": "failed", "failure": {"class": cls, "message": str(e) or type(e).__name__}}


def complete_result(result: Dict[str, Any], lease: Lease) -> None:
    """Add the lease's fencing token, session and step unless the handler set them."""
    result.setdefault("lease_token", lease.lease_token)
    result.setdefault("session_id", lease.session_id)
    result.setdefault("step", lease.step)


def heartbeat_plan(lease: Lease, fraction: float) -> Tuple[float, float]:
    """(lease length, heartbeat interval) in seconds, from the lease's expiry."""
    length = _seconds_left(lease.lease_expires_at)
    if length <= 0:
        length = 30.0  # the clocks disagree: assume the default lease
    return length, max(length * fraction, 0.2)


def _seconds_left(expires_at: str) -> float:
    # fromisoformat before Python 3.11 takes no "Z" and only three or six
    # fractional digits; RFC 3339 allows any number (Go sends up to nine).
    s = re.sub(r"\.(\d+)", lambda m: "." + (m.group(1) + "000000")[:6], expires_at.replace("Z", "+00:00"))
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return 0.0
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return (t - datetime.now(timezone.utc)).total_seconds()


class Worker:
    """Leases from one queue and runs ``handler`` on each delegation.

    Args:
        client: a client with a worker (or admin) token.
        queue: the queue to lease from.
        handler: ``handler(lease) -> dict`` returning the result contract's body.
            An exception becomes a ``failed`` result (class ``transient``,
            or ``permanent``/``bad_input`` for :class:`PermanentFailure` and
            :class:`BadInputFailure`).
        name: the worker name recorded on leases (default host-pid).
        wait_seconds: long-poll length of each lease call (≤ 30).
        heartbeat_fraction: heartbeat every this fraction of the lease length.
        on_result: called with an :class:`Outcome` after each lease.
    """

    def __init__(
        self,
        client: Client,
        *,
        queue: str,
        handler: Handler,
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
        self._stop = threading.Event()
        self.outcomes: List[Outcome] = []

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current lease call and handler."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    def run(self, max_leases: Optional[int] = None, *, handle_signals: bool = True) -> int:
        """Lease and handle until :meth:`stop` (or SIGTERM/SIGINT), or ``max_leases`` leases.

        A handler that is running when the stop comes finishes and its result
        is sent (graceful shutdown). Returns the number of leases handled.
        Signal handlers are installed only when called from the main thread.
        """
        restore = self._install_signals() if handle_signals else None
        handled = 0
        try:
            while not self._stop.is_set() and (max_leases is None or handled < max_leases):
                try:
                    got = self.client.lease(self.queue, worker=self.name, wait_seconds=self.wait_seconds)
                except TaskPilotsError as e:
                    log.warning("lease failed: %s", e)
                    self._stop.wait(LEASE_ERROR_PAUSE)
                    continue
                if got is None:
                    continue
                self.work(Lease.from_api(self.queue, got))
                handled += 1
        finally:
            if restore:
                restore()
        return handled

    def _install_signals(self) -> Optional[Callable[[], None]]:
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: Any) -> None:
            log.info("signal %d: finishing the current lease, then stopping", signum)
            self.stop()

        for s in previous:
            signal.signal(s, on_signal)

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)

        return restore

    def work(self, lease: Lease) -> Outcome:
        """Run the handler on one lease with heartbeats and submit its result."""
        done = threading.Event()
        hb = threading.Thread(target=self._heartbeat, args=(lease, done), name="taskpilots-heartbeat", daemon=True)
        hb.start()
        result: Optional[Dict[str, Any]] = None
        try:
            result = dict(self.handler(lease))
        except Exception as e:  # the handler's failure becomes the contract's failure
            result = failure_result(e)
        finally:
            done.set()
            hb.join()
        if lease.lost.is_set():
            log.warning("lease lost while working on %s; result dropped", lease.delegation_id)
            return self._report(Outcome(lease, result, None, LeaseLost(f"lease of {lease.delegation_id} lost")))
        complete_result(result, lease)
        try:
            answer = self.client.submit_result(lease.delegation_id, result)
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

    def _heartbeat(self, lease: Lease, done: threading.Event) -> None:
        length, every = heartbeat_plan(lease, self.heartbeat_fraction)
        expires = time.monotonic() + length
        while not done.wait(every):
            try:
                self.client.heartbeat(lease.delegation_id, lease.lease_token)
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
