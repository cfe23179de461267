"""TaskPilots Handoff client: sessions, delegation, leases with heartbeats and fencing, the event feed, webhooks.

Built on httpx; :class:`Client` blocks, :class:`AsyncClient` is its async
twin with the same methods. Quick start::

    import taskpilots
    tp = taskpilots.Client("http://localhost:8080", token)
    s = tp.create_session("Refund order 1182 if eligible", ticket_ref="T-1182")
    tp.delegate(s["session_id"], queue="refunds", step="check-eligibility",
                expected_version=s["state_version"])
"""

from . import models
from ._async_client import AsyncClient, AsyncFeed
from ._async_worker import AsyncWorker
from ._base import Prompt, new_idempotency_key
from ._client import Client, Feed
from .errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    FieldError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ServerError,
    TaskPilotsError,
    TransportError,
    ValidationError,
)
from .webhooks import WebhookVerificationError, sign as sign_webhook, verify as verify_webhook
from .worker import BadInputFailure, Lease, LeaseLost, Outcome, PermanentFailure, Worker

__version__ = "0.2.0"

__all__ = [
    "APIError",
    "AsyncClient",
    "AsyncFeed",
    "AsyncWorker",
    "AuthenticationError",
    "BadInputFailure",
    "BadRequestError",
    "Client",
    "ConflictError",
    "Feed",
    "FieldError",
    "Lease",
    "LeaseLost",
    "NotFoundError",
    "Outcome",
    "PayloadTooLargeError",
    "PermanentFailure",
    "PermissionDeniedError",
    "Prompt",
    "ServerError",
    "TaskPilotsError",
    "TransportError",
    "ValidationError",
    "WebhookVerificationError",
    "Worker",
    "models",
    "new_idempotency_key",
    "sign_webhook",
    "verify_webhook",
]
