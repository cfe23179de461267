"""What the sync and the async client share: settings, request building, answer decoding, the retry policy.

Everything here is free of I/O, so :class:`~taskpilots.Client` and
:class:`~taskpilots.AsyncClient` differ only in how they wait (blocking or
``await``).
"""

from __future__ import annotations

import email.utils
import functools
import json
import random
import ssl
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import httpx

from .errors import APIError, TaskPilotsError, error_from_response

JSON = Dict[str, Any]

#: Answers that mean "the application did not answer": safe to retry with the same key.
RETRYABLE_STATUS = frozenset({500, 502, 503, 504})

USER_AGENT = "taskpilots-python/0.2"


@functools.lru_cache(maxsize=None)
def default_ssl_context() -> ssl.SSLContext:
    """httpx's default TLS context, built once per process.

    Building it reads the CA bundle (about 0.2 s); every client we create
    shares this one instead (an SSLContext may be shared between connections
    and threads).
    """
    return httpx.create_ssl_context()


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


@dataclass(frozen=True)
class Call:
    """One API call, ready to be sent (and re-sent unchanged on a retry)."""

    method: str
    path: str
    url: str
    params: Dict[str, str]
    body: Optional[bytes]
    headers: Dict[str, str]
    retryable: bool
    timeout: float
    raw: bool


def drop_none(d: Mapping[str, Any]) -> JSON:
    return {k: v for k, v in d.items() if v is not None}


def csv(v: Union[None, str, Sequence[str]]) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    return ",".join(v)


def seg(s: str) -> str:
    """One path segment, escaped (ids and queue names may hold any character)."""
    return urllib.parse.quote(s, safe="")


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header: delay-seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Settings:
    """The connection settings and the pure parts of a call."""

    def __init__(self, base_url: str, token: str, timeout: float, max_retries: int, backoff: float,
                 max_backoff: float, user_agent: str) -> None:
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

    def build(self, method: str, path: str, query: Optional[Mapping[str, Any]], body: Any, idempotent: bool,
              idempotency_key: Optional[str], wait: float, raw: bool) -> Call:
        """The call with its Idempotency-Key fixed once, so that every retry resends the same one."""
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        key = None
        if method != "GET" and idempotent:
            key = idempotency_key or new_idempotency_key()
            headers["Idempotency-Key"] = key
        return Call(method=method, path=path, url=self.base_url + "/api/v1" + path, params=params, body=data,
                    headers=headers, retryable=method == "GET" or key is not None, timeout=self.timeout + wait, raw=raw)

    def should_retry(self, call: Call, err: TaskPilotsError, attempt: int) -> bool:
        """Retry only calls that are safe to repeat, only when no application answer came, within max_retries."""
        if isinstance(err, APIError) and err.status not in RETRYABLE_STATUS:
            return False
        return call.retryable and attempt < self.max_retries

    def delay(self, attempt: int, err: TaskPilotsError) -> float:
        """Exponential backoff with jitter; a longer Retry-After wins (capped at four times max_backoff)."""
        d = min(self.backoff * (2 ** min(attempt, 20)), self.max_backoff)
        d = d / 2 + random.uniform(0, d / 2)
        retry_after = err.retry_after if isinstance(err, APIError) else None
        if retry_after is not None and retry_after > d:
            d = min(retry_after, self.max_backoff * 4)
        return d

    def decode(self, call: Call, resp: httpx.Response) -> Any:
        """The answer's value, or raise the typed error of an error answer."""
        if resp.status_code >= 400:
            err = error_from_response(call.method, call.path, resp.status_code, resp.content)
            err.retry_after = parse_retry_after(resp.headers.get("Retry-After"))
            raise err
        if call.raw:
            return Prompt(
                text=resp.content.decode("utf-8"),
                prefix_bytes=int(resp.headers.get("Prefix-Bytes") or 0),
                prefix_hash=resp.headers.get("Prefix-Hash", ""),
            )
        if resp.status_code == 204 or not resp.content:
            return None
        try:
            return json.loads(resp.content.decode("utf-8"))
        except ValueError as e:
            raise TaskPilotsError(f"{call.method} {call.path}: answer is not JSON: {e}") from e
