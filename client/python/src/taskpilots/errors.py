"""Typed errors of the TaskPilots client.

Every 4xx/5xx answer of the API is an ``application/problem+json`` body
(RFC 9457). :class:`APIError` carries its fields; the subclasses let callers
branch on what happened (``except ConflictError as e: e.current_version``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Type


class TaskPilotsError(Exception):
    """Base class of every error raised by this package."""


class TransportError(TaskPilotsError):
    """The request got no HTTP answer (connection refused, reset, timeout).

    Raised after the retries (if the call was retryable) are used up.
    """

    def __init__(self, method: str, path: str, cause: BaseException) -> None:
        super().__init__(f"{method} {path}: {cause}")
        self.method = method
        self.path = path
        self.cause = cause


@dataclass(frozen=True)
class FieldError:
    """One offending field of a request, as listed in ``errors``."""

    field: str
    message: str


class APIError(TaskPilotsError):
    """An error answer of the API, with the problem+json fields.

    Attributes:
        status: the HTTP status code.
        title: short summary of the problem type.
        detail: what went wrong with this request.
        type: the problem type URI.
        errors: every offending field (may be empty).
        current_version: the session's current version on a 409 (and on
            illegal transitions), else None.
        body: the decoded problem document (or the raw text if it was not JSON).
    """

    def __init__(
        self,
        method: str,
        path: str,
        status: int,
        title: str = "",
        detail: str = "",
        type: str = "",
        errors: Optional[List[FieldError]] = None,
        current_version: Optional[int] = None,
        body: Any = None,
    ) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.errors: List[FieldError] = list(errors or [])
        self.current_version = current_version
        self.body = body
        #: Seconds the server asked to wait before a retry (Retry-After), if it said.
        self.retry_after: Optional[float] = None
        msg = f"{method} {path}: {status} {title}".rstrip()
        if detail:
            msg += f": {detail}"
        if self.errors:
            msg += " [" + "; ".join(f"{e.field}: {e.message}" for e in self.errors) + "]"
        super().__init__(msg)

    def field(self, name: str) -> Optional[str]:
        """The message for field ``name``, or None when it is not listed."""
        for e in self.errors:
            if e.field == name:
                return e.message
        return None

    @property
    def fields(self) -> List[str]:
        """The names of the offending fields."""
        return [e.field for e in self.errors]


class BadRequestError(APIError):
    """400: the body was not valid JSON (or the request was malformed)."""


class AuthenticationError(APIError):
    """401: missing or invalid token."""


class PermissionDeniedError(APIError):
    """403: the token's role may not call this operation."""


class NotFoundError(APIError):
    """404: unknown id."""


class ConflictError(APIError):
    """409: version or lease conflict.

    ``current_version`` is the session's version now; a controller re-reads
    the session and decides again. For a worker it means the lease expired
    or was superseded (the fencing token is stale).
    """


class PayloadTooLargeError(APIError):
    """413: the request body is over the server's limit."""


class ValidationError(APIError):
    """422: validation failure or illegal transition; ``errors`` lists every field."""


class ServerError(APIError):
    """5xx: the server could not answer (retried first when the call is idempotent)."""


_BY_STATUS: Dict[int, Type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
}


def error_from_response(method: str, path: str, status: int, raw: bytes) -> APIError:
    """Build the typed error for an error answer (problem+json or not)."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    try:
        doc = json.loads(raw.decode("utf-8")) if raw else {}
    except (ValueError, UnicodeDecodeError):
        text = raw[:512].decode("utf-8", "replace")
        return cls(method, path, status, detail=text, body=text)
    if not isinstance(doc, dict):
        return cls(method, path, status, body=doc)
    errs = [
        FieldError(str(e.get("field", "")), str(e.get("message", "")))
        for e in doc.get("errors") or []
        if isinstance(e, dict)
    ]
    cv = doc.get("current_version")
    return cls(
        method,
        path,
        status,
        title=str(doc.get("title", "")),
        detail=str(doc.get("detail", "")),
        type=str(doc.get("type", "")),
        errors=errs,
        current_version=int(cv) if isinstance(cv, (int, float)) else None,
        body=doc,
    )
