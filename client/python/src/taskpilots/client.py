"""HTTP client of the TaskPilots Handoff API (``/api/v1``), standard library only.

Every write carries an ``Idempotency-Key``: generated per call (or given with
``idempotency_key=``) and sent again, unchanged, on each retry of that call,
so a retry after a lost answer replays the first answer instead of writing
twice. Retries (exponential backoff with jitter, ``Retry-After`` honoured)
happen only on connection errors and 5xx answers, and only for calls that are
safe to repeat: reads, and writes that carry an idempotency key. A 4xx is
never retried: the server wrote nothing and the same request would fail again.
"""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import APIError, TaskPilotsError, TransportError, error_from_response

__all__ = ["Client", "Feed", "Prompt", "new_idempotency_key"]

JSON = Dict[str, Any]

#: Answers that mean "the application did not answer": safe to retry with the same key.
RETRYABLE_STATUS = frozenset({500, 502, 503, 504})


def new_idempotency_key() -> str:
    """A random key for the ``Idempotency-Key`` header."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Prompt:
    """A packet rendered for a model (``format=prompt``).

    ``text[:prefix_bytes]`` (in UTF-8 bytes) is the stable prefix whose SHA-256
    is ``prefix_hash``: reuse a cached prompt prefix while it is unchanged.
    """

    text: str
    prefix_bytes: int
    prefix_hash: str

    @property
    def prefix(self) -> str:
        """The stable prefix of the text."""
        return self.text.encode("utf-8")[: self.prefix_bytes].decode("utf-8")


def _drop_none(d: Mapping[str, Any]) -> JSON:
    return {k: v for k, v in d.items() if v is not None}


def _csv(v: Union[None, str, Sequence[str]]) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    return ",".join(v)


class Client:
    """A client of one TaskPilots server.

    Args:
        base_url: the server's address, e.g. ``http://localhost:8080`` (a
            trailing ``/api/v1`` is accepted too).
        token: an API token (``taskpilots token create --role worker|controller|admin``).
        timeout: seconds per attempt, on top of any long-poll wait.
        max_retries: retries after the first attempt of a retryable call.
        backoff: first delay between retries in seconds; it doubles per retry.
        max_backoff: the largest delay between retries.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 4,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        user_agent: str = "taskpilots-python/0.1",
    ) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/api/v1"):
            base = base[: -len("/api/v1")]
        self.base_url = base
        self.token = token
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff = backoff
        self.max_backoff = max(backoff, max_backoff)
        self.user_agent = user_agent

    # ------------------------------------------------------------------ transport

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Any = None,
        idempotent: bool = False,
        idempotency_key: Optional[str] = None,
        wait: float = 0,
        raw: bool = False,
    ) -> Any:
        """Send one API call (with retries) and return the decoded answer.

        ``path`` is relative to ``/api/v1``. Writes with ``idempotent=True``
        get an Idempotency-Key (``idempotency_key`` or a new one) reused on
        every retry. Returns None on 204; with ``raw`` a ``(body bytes,
        headers)`` tuple.
        """
        url = self.base_url + "/api/v1" + path
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q)
        data = None if body is None else json.dumps(body).encode("utf-8")
        key = None
        if method != "GET" and idempotent:
            key = idempotency_key or new_idempotency_key()
        retryable = method == "GET" or key is not None
        attempt = 0
        while True:
            try:
                return self._attempt(method, path, url, data, key, wait, raw)
            except (APIError, TransportError) as e:
                if isinstance(e, APIError) and e.status not in RETRYABLE_STATUS:
                    raise
                if not retryable or attempt >= self.max_retries:
                    raise
                time.sleep(self._delay(attempt, getattr(e, "_retry_after", None)))
                attempt += 1

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        d = min(self.backoff * (2 ** min(attempt, 20)), self.max_backoff)
        d = d / 2 + random.uniform(0, d / 2)
        if retry_after is not None and retry_after > d:
            d = min(retry_after, self.max_backoff * 4)
        return d

    def _attempt(
        self, method: str, path: str, url: str, data: Optional[bytes], key: Optional[str], wait: float, raw: bool
    ) -> Any:
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", self.user_agent)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        if key:
            req.add_header("Idempotency-Key", key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout + wait) as resp:
                status = resp.status
                payload = resp.read()
                headers = {k.lower(): v for k, v in resp.headers.items()}
        except urllib.error.HTTPError as e:
            payload = e.read() if e.fp is not None else b""
            err = error_from_response(method, path, e.code, payload)
            ra = e.headers.get("Retry-After") if e.headers else None
            if ra:
                try:
                    setattr(err, "_retry_after", float(ra))
                except ValueError:
                    pass
            raise err from None
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError) as e:
            cause = e.reason if isinstance(e, urllib.error.URLError) and isinstance(e.reason, BaseException) else e
            raise TransportError(method, path, cause) from e
        if raw:
            return payload, headers
        if status == 204 or not payload:
            return None
        try:
            return json.loads(payload.decode("utf-8"))
        except ValueError as e:
            raise TaskPilotsError(f"{method} {path}: answer is not JSON: {e}") from e

    # ------------------------------------------------------------------ sessions

    def create_session(
        self,
        goal: str,
        *,
        ticket_ref: Optional[str] = None,
        constraints: Optional[List[str]] = None,
        resources: Optional[List[Mapping[str, str]]] = None,
        done_criteria: Optional[List[str]] = None,
        facts: Optional[Mapping[str, Any]] = None,
        priority: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        **extra: Any,
    ) -> JSON:
        """Create a session (controller) → ``{"session_id","status","state_version"}``."""
        body = _drop_none(
            dict(goal=goal, ticket_ref=ticket_ref, constraints=constraints, resources=resources,
                 done_criteria=done_criteria, facts=facts, priority=priority, **extra)
        )
        return self.request("POST", "/sessions", body=body, idempotent=True, idempotency_key=idempotency_key)

    def get_session(self, session_id: str) -> JSON:
        """The session with its latest valid state."""
        return self.request("GET", f"/sessions/{_seg(session_id)}")

    def session_events(self, session_id: str, *, after_seq: Optional[int] = None, limit: Optional[int] = None) -> JSON:
        """One page of a session's events → ``{"events","next_after_seq"}``."""
        return self.request("GET", f"/sessions/{_seg(session_id)}/events", query={"after_seq": after_seq, "limit": limit})

    def session_state(self, session_id: str, version: int) -> JSON:
        """The session's state as it was at ``version`` (rebuilt by replay)."""
        return self.request("GET", f"/sessions/{_seg(session_id)}/state", query={"version": version})

    def get_packet(self, session_id: str) -> JSON:
        """The current context packet as JSON."""
        return self.request("GET", f"/sessions/{_seg(session_id)}/packet")

    def get_packet_prompt(self, session_id: str) -> Prompt:
        """The current context packet rendered for a model, with its cacheable prefix."""
        data, headers = self.request("GET", f"/sessions/{_seg(session_id)}/packet", query={"format": "prompt"}, raw=True)
        return Prompt(
            text=data.decode("utf-8"),
            prefix_bytes=int(headers.get("prefix-bytes", "0") or 0),
            prefix_hash=headers.get("prefix-hash", ""),
        )

    def _transition(self, action: str, session_id: str, expected_version: int, key: Optional[str], **fields: Any) -> JSON:
        body = _drop_none(dict(expected_version=expected_version, **fields))
        return self.request("POST", f"/sessions/{_seg(session_id)}/{action}", body=body, idempotent=True, idempotency_key=key)

    def pause(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
              until: Optional[str] = None, idempotency_key: Optional[str] = None) -> JSON:
        """Pause a session; with ``until`` (RFC 3339, future) it is a snooze that resumes by itself."""
        return self._transition("pause", session_id, expected_version, idempotency_key, reason=reason, until=until)

    def snooze(self, session_id: str, expected_version: int, until: str, *, reason: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> JSON:
        """Pause until ``until`` (RFC 3339 UTC); the session resumes by itself then."""
        return self.pause(session_id, expected_version, reason=reason, until=until, idempotency_key=idempotency_key)

    def resume(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> JSON:
        """Resume a paused session."""
        return self._transition("resume", session_id, expected_version, idempotency_key, reason=reason)

    def escalate(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
                 question: Optional[str] = None, idempotency_key: Optional[str] = None) -> JSON:
        """Escalate a session to humans, optionally with a question."""
        return self._transition("escalate", session_id, expected_version, idempotency_key, reason=reason, question=question)

    def cancel(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> JSON:
        """Cancel a session."""
        return self._transition("cancel", session_id, expected_version, idempotency_key, reason=reason)

    def delegate(
        self,
        session_id: str,
        *,
        queue: str,
        step: str,
        expected_version: int,
        instructions: Optional[str] = None,
        max_attempts: Optional[int] = None,
        lease_seconds: Optional[int] = None,
        facts: Optional[Mapping[str, Any]] = None,
        delay_seconds: Optional[int] = None,
        available_at: Optional[str] = None,
        packet_max_bytes: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> JSON:
        """Delegate a step to a queue (controller).

        ``delay_seconds`` or ``available_at`` (RFC 3339) schedule it: it cannot
        be leased before then. → ``{"delegation_id","session_id","state_version","status"}``.
        """
        body = _drop_none(
            dict(queue=queue, step=step, expected_version=expected_version, instructions=instructions,
                 max_attempts=max_attempts, lease_seconds=lease_seconds, facts=facts, delay_seconds=delay_seconds,
                 available_at=available_at, packet_max_bytes=packet_max_bytes)
        )
        return self.request("POST", f"/sessions/{_seg(session_id)}/delegations", body=body, idempotent=True,
                            idempotency_key=idempotency_key)

    def spawn_children(self, session_id: str, *, expected_version: int, children: List[Mapping[str, Any]],
                       join: Optional[Mapping[str, Any]] = None, idempotency_key: Optional[str] = None) -> JSON:
        """Fan out child sessions with a join policy."""
        body = _drop_none(dict(expected_version=expected_version, children=children, join=join))
        return self.request("POST", f"/sessions/{_seg(session_id)}/children", body=body, idempotent=True,
                            idempotency_key=idempotency_key)

    def provide_input(
        self,
        session_id: str,
        *,
        expected_version: int,
        answer: Optional[str] = None,
        facts: Optional[Mapping[str, Any]] = None,
        delegate: Optional[Mapping[str, Any]] = None,
        idempotency_key: Optional[str] = None,
    ) -> JSON:
        """Answer a session that awaits input; ``delegate`` (queue, step, instructions) re-queues it at once."""
        body = _drop_none(dict(expected_version=expected_version, answer=answer, facts=facts, delegate=delegate))
        return self.request("POST", f"/sessions/{_seg(session_id)}/input", body=body, idempotent=True,
                            idempotency_key=idempotency_key)

    def add_note(self, session_id: str, text: str, *, evidence: Optional[Mapping[str, str]] = None,
                 expected_version: Optional[int] = None, idempotency_key: Optional[str] = None) -> JSON:
        """Add a note to a session; it reaches the next packets."""
        body = _drop_none(dict(text=text, evidence=evidence, expected_version=expected_version))
        return self.request("POST", f"/sessions/{_seg(session_id)}/notes", body=body, idempotent=True,
                            idempotency_key=idempotency_key)

    def list_sessions(
        self,
        *,
        status: Union[None, str, Sequence[str]] = None,
        queue: Optional[str] = None,
        ticket_ref: Optional[str] = None,
        parent_id: Optional[str] = None,
        q: Optional[str] = None,
        updated_after: Optional[str] = None,
        stalled: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> JSON:
        """One page of sessions, newest first → ``{"sessions","next_cursor"}``."""
        query = dict(status=_csv(status), queue=queue, ticket_ref=ticket_ref, parent_id=parent_id, q=q,
                     updated_after=updated_after, limit=limit, cursor=cursor,
                     stalled=None if stalled is None else ("true" if stalled else "false"))
        return self.request("GET", "/sessions", query=query)

    def iter_sessions(self, **filters: Any) -> Iterator[JSON]:
        """Every session matching ``filters`` (as for :meth:`list_sessions`), following the keyset cursor."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self.list_sessions(cursor=cursor, **filters)
            yield from page.get("sessions") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return

    # ------------------------------------------------------------------ worker side

    def lease(self, queue: str, *, worker: str, wait_seconds: int = 0,
              idempotency_key: Optional[str] = None) -> Optional[JSON]:
        """Lease the next delegation of ``queue`` (worker); long-polls up to ``wait_seconds`` (≤ 30).

        Returns the lease (``delegation_id``, ``lease_token``, ``packet``, …)
        or None when nothing became available in time.
        """
        return self.request("POST", f"/queues/{_seg(queue)}/lease", body={"worker": worker, "wait_seconds": wait_seconds},
                            idempotent=True, idempotency_key=idempotency_key, wait=wait_seconds)

    def heartbeat(self, delegation_id: str, lease_token: str, *, idempotency_key: Optional[str] = None) -> JSON:
        """Renew a lease → ``{"lease_expires_at"}``; ConflictError when it is no longer held."""
        return self.request("POST", f"/delegations/{_seg(delegation_id)}/heartbeat", body={"lease_token": lease_token},
                            idempotent=True, idempotency_key=idempotency_key)

    def submit_result(self, delegation_id: str, result: Mapping[str, Any], *,
                      idempotency_key: Optional[str] = None) -> JSON:
        """Submit the return contract of a delegation (worker).

        ``result`` holds ``lease_token`` (the fencing token), ``session_id``,
        ``step``, ``result_type`` and the rest of the contract. A stale lease
        token is a ConflictError; contract violations a ValidationError listing
        every field.
        """
        return self.request("POST", f"/delegations/{_seg(delegation_id)}/result", body=dict(result), idempotent=True,
                            idempotency_key=idempotency_key)

    # ------------------------------------------------------------------ feed

    def events(
        self,
        *,
        after: Optional[str] = None,
        types: Union[None, str, Sequence[str]] = None,
        queue: Optional[str] = None,
        session_id: Optional[str] = None,
        limit: Optional[int] = None,
        wait_seconds: int = 0,
    ) -> JSON:
        """One page of the event feed → ``{"events","next_cursor"}``; long-polls up to ``wait_seconds``."""
        query = dict(after=after, types=_csv(types), queue=queue, session_id=session_id, limit=limit,
                     wait_seconds=wait_seconds or None)
        return self.request("GET", "/events", query=query, wait=wait_seconds)

    def feed(
        self,
        *,
        after: Optional[str] = None,
        types: Union[None, str, Sequence[str]] = None,
        queue: Optional[str] = None,
        session_id: Optional[str] = None,
        limit: Optional[int] = None,
        wait_seconds: int = 10,
        stop_when_idle: bool = False,
    ) -> "Feed":
        """An iterator over the event feed that follows ``next_cursor``.

        It long-polls while nothing is new and runs until :meth:`Feed.close`
        (or, with ``stop_when_idle``, until a page comes back empty). Save
        ``feed.cursor`` to resume later with ``after=``.
        """
        return Feed(self, after=after, types=types, queue=queue, session_id=session_id, limit=limit,
                    wait_seconds=wait_seconds, stop_when_idle=stop_when_idle)

    # ------------------------------------------------------------------ routes

    def put_route(self, step: str, *, queue: str, instructions: Optional[str] = None,
                  lease_seconds: Optional[int] = None, max_attempts: Optional[int] = None,
                  idempotency_key: Optional[str] = None) -> JSON:
        """Create or replace the route of ``step``: a completed result naming it as next_step delegates it."""
        body = _drop_none(dict(queue=queue, instructions=instructions, lease_seconds=lease_seconds,
                               max_attempts=max_attempts))
        return self.request("PUT", f"/routes/{_seg(step)}", body=body, idempotent=True, idempotency_key=idempotency_key)

    def get_route(self, step: str) -> JSON:
        """The route of ``step``."""
        return self.request("GET", f"/routes/{_seg(step)}")

    def list_routes(self) -> JSON:
        """Every route → ``{"routes": [...]}``."""
        return self.request("GET", "/routes")

    def delete_route(self, step: str, *, idempotency_key: Optional[str] = None) -> None:
        """Delete the route of ``step``."""
        self.request("DELETE", f"/routes/{_seg(step)}", idempotent=True, idempotency_key=idempotency_key)

    def drain_route(self, step: str, *, idempotency_key: Optional[str] = None, **body: Any) -> JSON:
        """Delegate the sessions stalled on ``step`` through its route."""
        return self.request("POST", f"/routes/{_seg(step)}/drain", body=body, idempotent=True,
                            idempotency_key=idempotency_key)

    # ------------------------------------------------------------------ webhooks (admin)

    def create_webhook(self, url: str, *, types: Optional[List[str]] = None, description: Optional[str] = None,
                       idempotency_key: Optional[str] = None) -> JSON:
        """Register a webhook → ``{"id","secret"}`` (the secret is shown once).

        Retried with the call's idempotency key: a repeat with the same key
        and body replays the first answer, the secret included, and
        registers nothing more.
        """
        return self.request("POST", "/webhooks", body=_drop_none(dict(url=url, types=types, description=description)),
                            idempotent=True, idempotency_key=idempotency_key)

    def list_webhooks(self) -> JSON:
        """Every webhook → ``{"webhooks": [...]}``."""
        return self.request("GET", "/webhooks")

    def delete_webhook(self, webhook_id: str, *, idempotency_key: Optional[str] = None) -> None:
        """Delete a webhook."""
        self.request("DELETE", f"/webhooks/{_seg(webhook_id)}", idempotent=True, idempotency_key=idempotency_key)

    def rotate_webhook_secret(self, webhook_id: str, *, idempotency_key: Optional[str] = None) -> JSON:
        """Issue a new secret; the old one keeps signing for a grace period."""
        return self.request("POST", f"/webhooks/{_seg(webhook_id)}/rotate-secret", body={}, idempotent=True,
                            idempotency_key=idempotency_key)

    def webhook_deliveries(self, webhook_id: str, *, limit: Optional[int] = None) -> JSON:
        """The newest delivery attempts of a webhook → ``{"deliveries": [...]}``."""
        return self.request("GET", f"/webhooks/{_seg(webhook_id)}/deliveries", query={"limit": limit})

    def redeliver_webhook(self, webhook_id: str, event_id: str, *, idempotency_key: Optional[str] = None) -> JSON:
        """Queue one event for delivery again."""
        return self.request("POST", f"/webhooks/{_seg(webhook_id)}/deliveries/{_seg(event_id)}/redeliver", body={},
                            idempotent=True, idempotency_key=idempotency_key)

    # ------------------------------------------------------------------ meta

    def metrics(self, *, window: Optional[str] = None, queue: Optional[str] = None) -> JSON:
        """The product metrics (``window`` 24h, 7d or 30d), overall and per queue."""
        return self.request("GET", "/metrics", query={"window": window, "queue": queue})

    def openapi(self) -> JSON:
        """The server's OpenAPI document."""
        return self.request("GET", "/openapi.json")


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Feed:
    """Iterator over the event feed (see :meth:`Client.feed`).

    Each event is yielded once, in feed order; ``cursor`` is the position
    after the last page read.
    """

    def __init__(self, client: Client, *, after: Optional[str], types: Union[None, str, Sequence[str]],
                 queue: Optional[str], session_id: Optional[str], limit: Optional[int], wait_seconds: int,
                 stop_when_idle: bool) -> None:
        self.client = client
        self.cursor = after
        self._filters: Dict[str, Any] = dict(types=types, queue=queue, session_id=session_id, limit=limit)
        self.wait_seconds = wait_seconds
        self.stop_when_idle = stop_when_idle
        self._closed = False

    def close(self) -> None:
        """Stop the iteration after the current long poll."""
        self._closed = True

    def pages(self) -> Iterator[Tuple[List[JSON], str]]:
        """Yield ``(events, next_cursor)`` pages; empty pages included when long-polling."""
        while not self._closed:
            page = self.client.events(after=self.cursor, wait_seconds=self.wait_seconds, **self._filters)
            evs = page.get("events") or []
            if page.get("next_cursor"):
                self.cursor = page["next_cursor"]
            yield evs, self.cursor or ""
            if not evs and self.stop_when_idle:
                return

    def __iter__(self) -> Iterator[JSON]:
        for evs, _ in self.pages():
            yield from evs
