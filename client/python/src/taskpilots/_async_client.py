"""The asynchronous client of the TaskPilots Handoff API (``/api/v1``), on httpx.AsyncClient.

SOURCE of the synchronous client: scripts/unasync.py turns this file into
_client.py (``async``/``await`` removed, ``AsyncClient`` → ``Client``, …), so
both clients have the same methods, arguments and behaviour. Edit this file,
run ``python3 scripts/unasync.py`` and commit both.

Every write carries an ``Idempotency-Key``: generated per call (or given with
``idempotency_key=``) and sent again, unchanged, on each retry of that call,
so a retry after a lost answer replays the first answer instead of writing
twice. Retries (exponential backoff with jitter, ``Retry-After`` honoured)
happen only on connection errors and 500/502/503/504 answers, and only for
calls that are safe to repeat: reads, and writes that carry an idempotency
key. A 4xx is never retried: the server wrote nothing and the same request
would fail again.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

import httpx

from ._base import JSON, Prompt, Settings, USER_AGENT, csv, default_ssl_context, drop_none, new_idempotency_key, seg
from .errors import TaskPilotsError, TransportError
from .models import (
    BulkResult,
    ChildrenWritten,
    DelegationWritten,
    DeliveryList,
    DrainResult,
    EventsPage,
    FeedEvent,
    FeedPage,
    Heartbeat,
    Lease,
    LeaseBatch,
    Packet,
    ResultEntry,
    ResultItem,
    ResultsAnswer,
    ProductMetrics,
    QueueFlow,
    QueueFlowList,
    Route,
    RouteList,
    SecretRotated,
    Session,
    SessionList,
    SessionListItem,
    SessionWritten,
    State,
    WebhookCreated,
    WebhookList,
)

__all__ = ["AsyncClient", "AsyncFeed"]


class AsyncClient:
    """A client of one TaskPilots server.

    Args:
        base_url: the server's address, e.g. ``http://localhost:8080`` (a
            trailing ``/api/v1`` is accepted too).
        token: an API token (``taskpilots token create --role worker|controller|admin``).
        timeout: seconds per attempt, on top of any long-poll wait.
        max_retries: retries after the first attempt of a retryable call.
        backoff: first delay between retries in seconds; it doubles per retry.
        max_backoff: the largest delay between retries.
        http_client: an httpx.AsyncClient to send with (proxies, TLS settings,
            a mock transport in tests); by default one of our own, closed by
            :meth:`aclose`.
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
        user_agent: str = USER_AGENT,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self._s = Settings(base_url, token, timeout, max_retries, backoff, max_backoff, user_agent)
        self._own_http = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient(verify=default_ssl_context())

    @property
    def base_url(self) -> str:
        """The server's address, without ``/api/v1``."""
        return self._s.base_url

    async def aclose(self) -> None:
        """Close the connection pool (unless it was passed in as ``http_client``)."""
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ transport

    async def request(
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
        every retry. Returns None on 204 and 202; with ``raw`` a
        :class:`Prompt` of the text answer.
        """
        call = self._s.build(method, path, query, body, idempotent, idempotency_key, wait, raw)
        attempt = 0
        while True:
            try:
                try:
                    resp = await self._http.request(call.method, call.url, params=call.params, content=call.body,
                                                    headers=call.headers, timeout=call.timeout)
                except httpx.TransportError as e:
                    raise TransportError(call.method, call.path, e) from e
                return self._s.decode(call, resp)
            except TaskPilotsError as e:
                if not self._s.should_retry(call, e, attempt):
                    raise
                await asyncio.sleep(self._s.delay(attempt, e))
                attempt += 1

    # ------------------------------------------------------------------ sessions

    async def create_session(
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
    ) -> SessionWritten:
        """Create a session (controller) → ``{"session_id","status","state_version"}``."""
        body = drop_none(
            dict(goal=goal, ticket_ref=ticket_ref, constraints=constraints, resources=resources,
                 done_criteria=done_criteria, facts=facts, priority=priority, **extra)
        )
        return await self.request("POST", "/sessions", body=body, idempotent=True, idempotency_key=idempotency_key)

    async def get_session(self, session_id: str) -> Session:
        """The session with its latest valid state."""
        return await self.request("GET", f"/sessions/{seg(session_id)}")

    async def session_events(self, session_id: str, *, after_seq: Optional[int] = None, limit: Optional[int] = None) -> EventsPage:
        """One page of a session's events → ``{"events","next_after_seq"}``."""
        return await self.request("GET", f"/sessions/{seg(session_id)}/events", query={"after_seq": after_seq, "limit": limit})

    async def session_state(self, session_id: str, version: int) -> State:
        """The session's state as it was at ``version`` (rebuilt by replay)."""
        return await self.request("GET", f"/sessions/{seg(session_id)}/state", query={"version": version})

    async def get_packet(self, session_id: str) -> Packet:
        """The current context packet as JSON."""
        return await self.request("GET", f"/sessions/{seg(session_id)}/packet")

    async def get_packet_prompt(self, session_id: str) -> Prompt:
        """The current context packet rendered for a model, with its cacheable prefix."""
        prompt: Prompt = await self.request("GET", f"/sessions/{seg(session_id)}/packet", query={"format": "prompt"}, raw=True)
        return prompt

    async def _transition(self, action: str, session_id: str, expected_version: int, key: Optional[str], **fields: Any) -> SessionWritten:
        body = drop_none(dict(expected_version=expected_version, **fields))
        return await self.request("POST", f"/sessions/{seg(session_id)}/{action}", body=body, idempotent=True, idempotency_key=key)

    async def pause(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
              until: Optional[str] = None, idempotency_key: Optional[str] = None) -> SessionWritten:
        """Pause a session; with ``until`` (RFC 3339, future) it is a snooze that resumes by itself."""
        return await self._transition("pause", session_id, expected_version, idempotency_key, reason=reason, until=until)

    async def snooze(self, session_id: str, expected_version: int, until: str, *, reason: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> SessionWritten:
        """Pause until ``until`` (RFC 3339 UTC); the session resumes by itself then."""
        return await self.pause(session_id, expected_version, reason=reason, until=until, idempotency_key=idempotency_key)

    async def resume(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> SessionWritten:
        """Resume a paused session."""
        return await self._transition("resume", session_id, expected_version, idempotency_key, reason=reason)

    async def escalate(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
                 question: Optional[str] = None, idempotency_key: Optional[str] = None) -> SessionWritten:
        """Escalate a session to humans, optionally with a question."""
        return await self._transition("escalate", session_id, expected_version, idempotency_key, reason=reason, question=question)

    async def cancel(self, session_id: str, expected_version: int, *, reason: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> SessionWritten:
        """Cancel a session."""
        return await self._transition("cancel", session_id, expected_version, idempotency_key, reason=reason)

    async def bulk(
        self,
        action: str,
        *,
        session_ids: Optional[Sequence[str]] = None,
        filter: Optional[Mapping[str, str]] = None,
        reason: Optional[str] = None,
        dry_run: Optional[bool] = None,
        idempotency_key: Optional[str] = None,
    ) -> BulkResult:
        """Cancel, pause, resume or escalate up to 500 sessions, named by ``session_ids`` or
        matched by ``filter`` (status, queue, ticket_ref, q); each is its own transition
        → ``{"applied","skipped","matched"}``."""
        body = drop_none(dict(action=action, session_ids=list(session_ids) if session_ids is not None else None,
                              filter=dict(filter) if filter is not None else None, reason=reason, dry_run=dry_run))
        return await self.request("POST", "/sessions/bulk", body=body, idempotent=True, idempotency_key=idempotency_key)

    async def delegate(
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
    ) -> DelegationWritten:
        """Delegate a step to a queue (controller).

        ``delay_seconds`` or ``available_at`` (RFC 3339) schedule it: it cannot
        be leased before then. → ``{"delegation_id","session_id","state_version","status"}``.
        """
        body = drop_none(
            dict(queue=queue, step=step, expected_version=expected_version, instructions=instructions,
                 max_attempts=max_attempts, lease_seconds=lease_seconds, facts=facts, delay_seconds=delay_seconds,
                 available_at=available_at, packet_max_bytes=packet_max_bytes)
        )
        return await self.request("POST", f"/sessions/{seg(session_id)}/delegations", body=body, idempotent=True,
                                  idempotency_key=idempotency_key)

    async def spawn_children(self, session_id: str, *, expected_version: int, children: List[Mapping[str, Any]],
                       join: Optional[Mapping[str, Any]] = None, idempotency_key: Optional[str] = None) -> ChildrenWritten:
        """Fan out child sessions with a join policy."""
        body = drop_none(dict(expected_version=expected_version, children=children, join=join))
        return await self.request("POST", f"/sessions/{seg(session_id)}/children", body=body, idempotent=True,
                                  idempotency_key=idempotency_key)

    async def provide_input(
        self,
        session_id: str,
        *,
        expected_version: int,
        answer: Optional[str] = None,
        facts: Optional[Mapping[str, Any]] = None,
        delegate: Optional[Mapping[str, Any]] = None,
        idempotency_key: Optional[str] = None,
    ) -> SessionWritten:
        """Answer a session that awaits input; ``delegate`` (queue, step, instructions) re-queues it at once."""
        body = drop_none(dict(expected_version=expected_version, answer=answer, facts=facts, delegate=delegate))
        return await self.request("POST", f"/sessions/{seg(session_id)}/input", body=body, idempotent=True,
                                  idempotency_key=idempotency_key)

    async def add_note(self, session_id: str, text: str, *, evidence: Optional[Mapping[str, str]] = None,
                 expected_version: Optional[int] = None, idempotency_key: Optional[str] = None) -> SessionWritten:
        """Add a note to a session; it reaches the next packets."""
        body = drop_none(dict(text=text, evidence=evidence, expected_version=expected_version))
        return await self.request("POST", f"/sessions/{seg(session_id)}/notes", body=body, idempotent=True,
                                  idempotency_key=idempotency_key)

    async def list_sessions(
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
    ) -> SessionList:
        """One page of sessions, newest first → ``{"sessions","next_cursor"}``."""
        query = dict(status=csv(status), queue=queue, ticket_ref=ticket_ref, parent_id=parent_id, q=q,
                     updated_after=updated_after, limit=limit, cursor=cursor,
                     stalled=None if stalled is None else ("true" if stalled else "false"))
        return await self.request("GET", "/sessions", query=query)

    async def iter_sessions(self, **filters: Any) -> AsyncIterator[SessionListItem]:
        """Every session matching ``filters`` (as for :meth:`list_sessions`), following the keyset cursor."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.list_sessions(cursor=cursor, **filters)
            for item in page.get("sessions") or []:
                yield item
            cursor = page.get("next_cursor")
            if not cursor:
                return

    # ------------------------------------------------------------------ worker side

    async def lease(self, queue: str, *, worker: str, wait_seconds: int = 0,
              idempotency_key: Optional[str] = None) -> Optional[Lease]:
        """Lease the next delegation of ``queue`` (worker); long-polls up to ``wait_seconds`` (≤ 30).

        Returns the lease (``delegation_id``, ``lease_token``, ``packet``, …)
        or None when nothing became available in time.
        """
        return await self.request("POST", f"/queues/{seg(queue)}/lease", body={"worker": worker, "wait_seconds": wait_seconds},
                                  idempotent=True, idempotency_key=idempotency_key, wait=wait_seconds)

    async def lease_batch(self, queue: str, *, worker: str, max: int, wait_seconds: int = 0,
                    idempotency_key: Optional[str] = None) -> List[Lease]:
        """Lease up to ``max`` (1–100) delegations of ``queue`` in one claim (worker).

        Long-polls up to ``wait_seconds`` for the first; returns an empty list
        when nothing came. Each lease is one of its own: its own token,
        expiry, heartbeats and result.
        """
        out: Optional[LeaseBatch] = await self.request(
            "POST", f"/queues/{seg(queue)}/lease", body={"worker": worker, "wait_seconds": wait_seconds, "max": max},
            idempotent=True, idempotency_key=idempotency_key, wait=wait_seconds)
        return list(out["leases"]) if out else []

    async def heartbeat(self, delegation_id: str, lease_token: str, *, idempotency_key: Optional[str] = None) -> Heartbeat:
        """Renew a lease → ``{"lease_expires_at"}``; ConflictError when it is no longer held."""
        return await self.request("POST", f"/delegations/{seg(delegation_id)}/heartbeat", body={"lease_token": lease_token},
                                  idempotent=True, idempotency_key=idempotency_key)

    async def submit_result(self, delegation_id: str, result: Mapping[str, Any], *,
                      idempotency_key: Optional[str] = None) -> SessionWritten:
        """Submit the return contract of a delegation (worker).

        ``result`` holds ``lease_token`` (the fencing token), ``session_id``,
        ``step``, ``result_type`` and the rest of the contract. A stale lease
        token is a ConflictError; contract violations a ValidationError listing
        every field.
        """
        return await self.request("POST", f"/delegations/{seg(delegation_id)}/result", body=dict(result), idempotent=True,
                                  idempotency_key=idempotency_key)

    async def submit_results(self, results: Sequence[ResultItem]) -> List[ResultEntry]:
        """Submit up to 100 results in one call and one transaction (worker).

        Each item is the body of :meth:`submit_result` plus ``delegation_id``
        and an ``idempotency_key`` (a new one when missing, kept across this
        call's retries). The answer has one entry per item, in order:
        ``status`` and ``outcome`` (200, with ``replayed`` on a repeated key)
        or ``problem`` (4xx): a fenced, stale or invalid item writes nothing
        for itself and takes no other down. An empty or oversized batch is a
        ValidationError.
        """
        items = [dict(r, idempotency_key=r.get("idempotency_key") or new_idempotency_key()) for r in results]
        out: ResultsAnswer = await self.request("POST", "/results", body={"results": items}, idempotent=True)
        return list(out["results"])

    # ------------------------------------------------------------------ feed

    async def events(
        self,
        *,
        after: Optional[str] = None,
        types: Union[None, str, Sequence[str]] = None,
        queue: Optional[str] = None,
        session_id: Optional[str] = None,
        limit: Optional[int] = None,
        wait_seconds: int = 0,
    ) -> FeedPage:
        """One page of the event feed → ``{"events","next_cursor"}``; long-polls up to ``wait_seconds``."""
        query = dict(after=after, types=csv(types), queue=queue, session_id=session_id, limit=limit,
                     wait_seconds=wait_seconds or None)
        return await self.request("GET", "/events", query=query, wait=wait_seconds)

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
    ) -> "AsyncFeed":
        """An iterator over the event feed that follows ``next_cursor``.

        It long-polls while nothing is new and runs until :meth:`AsyncFeed.close`
        (or, with ``stop_when_idle``, until a page comes back empty). Save
        ``feed.cursor`` to resume later with ``after=``.
        """
        return AsyncFeed(self, after=after, types=types, queue=queue, session_id=session_id, limit=limit,
                    wait_seconds=wait_seconds, stop_when_idle=stop_when_idle)

    # ------------------------------------------------------------------ routes

    async def put_queue(self, queue: str, *, max_in_flight: Optional[int] = None,
                        max_leases_per_second: Optional[float] = None,
                        idempotency_key: Optional[str] = None) -> QueueFlow:
        """Set (replace) the flow control of ``queue`` (admin); None is no limit."""
        body = dict(max_in_flight=max_in_flight, max_leases_per_second=max_leases_per_second)
        return await self.request("PUT", f"/queues/{seg(queue)}", body=body, idempotent=True, idempotency_key=idempotency_key)

    async def get_queue(self, queue: str) -> QueueFlow:
        """The flow control of ``queue`` and its in-flight count."""
        return await self.request("GET", f"/queues/{seg(queue)}")

    async def list_queues(self) -> QueueFlowList:
        """The queues with flow control or leases out."""
        return await self.request("GET", "/queues")

    async def put_route(self, step: str, *, queue: str, instructions: Optional[str] = None,
                  lease_seconds: Optional[int] = None, max_attempts: Optional[int] = None,
                  idempotency_key: Optional[str] = None) -> Route:
        """Create or replace the route of ``step``: a completed result naming it as next_step delegates it."""
        body = drop_none(dict(queue=queue, instructions=instructions, lease_seconds=lease_seconds,
                               max_attempts=max_attempts))
        return await self.request("PUT", f"/routes/{seg(step)}", body=body, idempotent=True, idempotency_key=idempotency_key)

    async def get_route(self, step: str) -> Route:
        """The route of ``step``."""
        return await self.request("GET", f"/routes/{seg(step)}")

    async def list_routes(self) -> RouteList:
        """Every route."""
        return await self.request("GET", "/routes")

    async def delete_route(self, step: str, *, idempotency_key: Optional[str] = None) -> None:
        """Delete the route of ``step``."""
        await self.request("DELETE", f"/routes/{seg(step)}", idempotent=True, idempotency_key=idempotency_key)

    async def drain_route(self, step: str, *, idempotency_key: Optional[str] = None, **body: Any) -> DrainResult:
        """Delegate the sessions stalled on ``step`` through its route."""
        return await self.request("POST", f"/routes/{seg(step)}/drain", body=body, idempotent=True,
                                  idempotency_key=idempotency_key)

    # ------------------------------------------------------------------ webhooks (admin)

    async def create_webhook(self, url: str, *, types: Optional[List[str]] = None, description: Optional[str] = None,
                       idempotency_key: Optional[str] = None) -> WebhookCreated:
        """Register a webhook → ``{"id","secret"}`` (the secret is shown once).

        Retried with the call's idempotency key: a repeat with the same key
        and body replays the first answer, the secret included, and
        registers nothing more.
        """
        return await self.request("POST", "/webhooks", body=drop_none(dict(url=url, types=types, description=description)),
                                  idempotent=True, idempotency_key=idempotency_key)

    async def list_webhooks(self) -> WebhookList:
        """Every webhook → ``{"webhooks": [...]}``."""
        return await self.request("GET", "/webhooks")

    async def delete_webhook(self, webhook_id: str, *, idempotency_key: Optional[str] = None) -> None:
        """Delete a webhook."""
        await self.request("DELETE", f"/webhooks/{seg(webhook_id)}", idempotent=True, idempotency_key=idempotency_key)

    async def rotate_webhook_secret(self, webhook_id: str, *, idempotency_key: Optional[str] = None) -> SecretRotated:
        """Issue a new secret; the old one keeps signing for a grace period."""
        return await self.request("POST", f"/webhooks/{seg(webhook_id)}/rotate-secret", body={}, idempotent=True,
                                  idempotency_key=idempotency_key)

    async def webhook_deliveries(self, webhook_id: str, *, limit: Optional[int] = None) -> DeliveryList:
        """The newest delivery attempts of a webhook → ``{"deliveries": [...]}``."""
        return await self.request("GET", f"/webhooks/{seg(webhook_id)}/deliveries", query={"limit": limit})

    async def redeliver_webhook(self, webhook_id: str, event_id: str, *, idempotency_key: Optional[str] = None) -> None:
        """Queue one event for delivery again."""
        return await self.request("POST", f"/webhooks/{seg(webhook_id)}/deliveries/{seg(event_id)}/redeliver", body={},
                                  idempotent=True, idempotency_key=idempotency_key)

    # ------------------------------------------------------------------ meta

    async def metrics(self, *, window: Optional[str] = None, queue: Optional[str] = None) -> ProductMetrics:
        """The product metrics (``window`` 24h, 7d or 30d), overall and per queue."""
        return await self.request("GET", "/metrics", query={"window": window, "queue": queue})

    async def openapi(self) -> JSON:
        """The server's OpenAPI document."""
        return await self.request("GET", "/openapi.json")


class AsyncFeed:
    """Iterator over the event feed (see :meth:`AsyncClient.feed`).

    Each event is yielded once, in feed order; ``cursor`` is the position
    after the last page read: save it to resume with ``after=``.
    """

    def __init__(self, client: AsyncClient, *, after: Optional[str], types: Union[None, str, Sequence[str]],
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

    async def pages(self) -> AsyncIterator[Tuple[List[FeedEvent], str]]:
        """Yield ``(events, next_cursor)`` pages; empty pages included when long-polling."""
        while not self._closed:
            page = await self.client.events(after=self.cursor, wait_seconds=self.wait_seconds, **self._filters)
            evs = page.get("events") or []
            if page.get("next_cursor"):
                self.cursor = page["next_cursor"]
            yield evs, self.cursor or ""
            if not evs and self.stop_when_idle:
                return

    async def __aiter__(self) -> AsyncIterator[FeedEvent]:
        async for evs, _ in self.pages():
            for ev in evs:
                yield ev
