"""Webhook signature verification per the Standard Webhooks specification.

TaskPilots signs each delivery with the headers ``webhook-id`` (the event id),
``webhook-timestamp`` (Unix seconds) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, space-separated when
several secrets are valid during a rotation), keyed by the base64 part of the
``whsec_`` secret. Standard library only (hmac, hashlib, base64): PyPI's
``standardwebhooks`` package (``Webhook(secret).verify(body, headers)``) is a
drop-in alternative; tests/test_offline.py checks this implementation
against that specification's npm package, both ways.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Any, Mapping, Optional, Union

from .errors import TaskPilotsError

#: How far the timestamp may be from now (either way), as in the reference
#: implementations: limits replays of a captured delivery.
DEFAULT_TOLERANCE_SECONDS = 5 * 60


class WebhookVerificationError(TaskPilotsError):
    """The delivery's signature, timestamp or headers do not verify."""


def _key(secret: Union[str, bytes]) -> bytes:
    if isinstance(secret, bytes):
        return secret
    s = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as e:
        raise WebhookVerificationError(f"webhook secret is not base64: {e}") from e


def sign(secret: Union[str, bytes], msg_id: str, timestamp: int, body: Union[str, bytes]) -> str:
    """Return the ``webhook-signature`` value (``v1,<base64>``) for one message."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    signed = f"{msg_id}.{int(timestamp)}.".encode("utf-8") + data
    mac = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def _header(headers: Mapping[str, Any], name: str) -> Optional[str]:
    for k, v in headers.items():
        if k.lower() == name:
            return str(v)
    return None


def verify(
    secret: Union[str, bytes],
    body: Union[str, bytes],
    headers: Mapping[str, Any],
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: Optional[float] = None,
) -> Any:
    """Verify a delivery and return its decoded JSON payload.

    Args:
        secret: the webhook's ``whsec_…`` secret (as returned at registration).
        body: the raw request body, exactly as received (do not re-encode it).
        headers: the request headers (any case).
        tolerance_seconds: how old (or how far in the future) the timestamp may be.
        now: the current Unix time (tests).

    Raises:
        WebhookVerificationError: a header is missing, the timestamp is out of
            tolerance, or no signature matches.
    """
    msg_id = _header(headers, "webhook-id")
    ts = _header(headers, "webhook-timestamp")
    sigs = _header(headers, "webhook-signature")
    if not msg_id or not ts or not sigs:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header")
    try:
        ts_int = int(ts)
    except ValueError as e:
        raise WebhookVerificationError(f"invalid webhook-timestamp {ts!r}") from e
    current = time.time() if now is None else now
    if abs(current - ts_int) > tolerance_seconds:
        raise WebhookVerificationError("webhook-timestamp outside the tolerance")
    expected = sign(secret, msg_id, ts_int, body).split(",", 1)[1].encode("ascii")
    for candidate in sigs.split(" "):
        version, _, value = candidate.partition(",")
        if version != "v1":
            continue
        # Compare in constant time so the signature cannot be guessed byte by byte.
        if hmac.compare_digest(value.encode("ascii", "replace"), expected):
            try:
                return json.loads(body.decode("utf-8") if isinstance(body, bytes) else body)
            except ValueError as e:  # signed, but not a payload of ours
                raise WebhookVerificationError(f"payload is not JSON: {e}") from e
    raise WebhookVerificationError("no matching signature")
