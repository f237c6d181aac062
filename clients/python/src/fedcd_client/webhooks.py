"""Check a fedcd webhook delivery in your receiver before trusting it.

The gateway signs each delivery (server side: ``app/webhooks.py``)::

    X-Fedcd-Signature: sha256=<hex HMAC-SHA256 of "<X-Fedcd-Timestamp>.<raw body>" under the shared secret>
    X-Fedcd-Timestamp: <Unix seconds>
    X-Fedcd-Delivery:  <id, the same on every retry of one event: deduplicate on it>

:func:`verify_webhook` recomputes the signature over the *raw* body (before any JSON parsing: re-serialised JSON
would not match), compares in constant time, refuses a timestamp more than ``tolerance_s`` away (a captured
delivery cannot be replayed later), and returns the parsed event.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedcd_client._errors import WebhookVerificationError

__all__ = [
    "DELIVERY_HEADER", "EVENT_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "WebhookEvent", "sign_webhook",
    "verify_webhook",
]

SIGNATURE_HEADER = "X-Fedcd-Signature"
TIMESTAMP_HEADER = "X-Fedcd-Timestamp"
EVENT_HEADER = "X-Fedcd-Event"
DELIVERY_HEADER = "X-Fedcd-Delivery"
DEFAULT_TOLERANCE_S = 300.0  # the server's own verify() default


@dataclass(frozen=True)
class WebhookEvent:
    """A verified delivery: ``type`` (``job.finished``), ``delivery_id``, ``tenant`` and ``job`` (the job's fields,
    as ``GET /v1/jobs/{job_id}`` gives them, without its history)."""

    type: str
    delivery_id: str
    tenant: str
    created_at: str
    job: dict[str, Any]


def sign_webhook(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Fedcd-Signature`` value of ``body`` sent at ``timestamp`` (for tests of your receiver)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify_webhook(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> WebhookEvent:
    """The delivery's event, once its signature and timestamp check out; else :class:`WebhookVerificationError`.

    ``headers``: the request's headers (any mapping; names are matched without regard to case); ``body``: the raw
    bytes received."""
    lowered = {k.lower(): v for k, v in headers.items()}
    signature = lowered.get(SIGNATURE_HEADER.lower())
    timestamp = lowered.get(TIMESTAMP_HEADER.lower())
    if not signature or not timestamp:
        raise WebhookVerificationError(f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER}")
    try:
        age = abs((time.time() if now is None else now) - int(timestamp))
    except ValueError:
        raise WebhookVerificationError(f"{TIMESTAMP_HEADER} is not Unix seconds") from None
    if age > tolerance_s:
        raise WebhookVerificationError(f"timestamp {age:.0f} s away from now (tolerance {tolerance_s:g} s)")
    if not hmac.compare_digest(sign_webhook(secret, timestamp, body), signature):
        raise WebhookVerificationError("signature mismatch (wrong secret, or the body was changed)")
    try:
        event = json.loads(body)
        return WebhookEvent(type=event["type"], delivery_id=event["delivery_id"], tenant=event["tenant"],
                            created_at=event["created_at"], job=dict(event["job"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise WebhookVerificationError(f"signed, but not a fedcd event: {exc!r}") from None
