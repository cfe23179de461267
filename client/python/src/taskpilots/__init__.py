"""TaskPilots Handoff client: sessions, delegation, leases with heartbeats and fencing, the event feed, webhooks.

Standard library only. Quick start::

    import taskpilots
    tp = taskpilots.Client("http://localhost:8080", token)
    s = tp.create_session("Refund order 1182 if eligible", ticket_ref="T-1182")
    tp.delegate(s["session_id"], queue="refunds", step="check-eligibility",
                expected_version=s["state_version"])
"""

from .client import Client, Feed, Prompt, new_idempotency_key
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

__version__ = "0.1.0"

__all__ = [
    "APIError",
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
    "new_idempotency_key",
    "sign_webhook",
    "verify_webhook",
]
