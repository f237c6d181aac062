"""Signed webhooks: a POST to the tenant's URL when one of its jobs finishes (README "Webhooks").

Configured by the operator (``FEDCD_WEBHOOKS``: tenant, or ``*`` for every tenant without its own, → ``{url,
secret}``), never by API callers: the gateway only posts to URLs its operator wrote down. Only ``http``/``https`` URLs
are accepted and redirects are not followed (a 3xx is a failed delivery), so a receiver cannot bounce the gateway's
POST elsewhere; the URL may still be an internal address on purpose, which is why tenants cannot set it.

Each delivery is signed: ``X-Fedcd-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" under the secret>``
with the timestamp in ``X-Fedcd-Timestamp`` (Unix seconds) — the receiver recomputes it (:func:`verify`) and refuses
an old timestamp, so a captured delivery cannot be replayed later. ``X-Fedcd-Delivery`` is the same on every retry of
one event (receivers deduplicate on it).

A delivery runs as its own task: the job is finished and stored before it starts, and nothing it does (a slow,
failing or unreachable receiver) reaches the job. Connection errors, timeouts, 408, 429 and 5xx are retried with
exponential backoff (``webhook_backoff_s``, doubled each time, at most 5 minutes apart, ``webhook_attempts`` in all);
other answers are final. Each attempt has one deadline (``webhook_timeout_s``) from connecting to the status line,
and only the status is read: the receiver's body is closed unread. Deliveries live in memory: one still retrying when its worker stops is lost, so a receiver
that must not miss an event also polls ``GET /v1/jobs?state=succeeded`` now and then.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import Counter
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, SecretStr
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

if TYPE_CHECKING:
    from app.settings import Settings

__all__ = [
    "DELIVERY_HEADER", "EVENT_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "WebhookSender", "WebhookTarget",
    "sign", "verify",
]

log = logging.getLogger("fedcd.webhooks")

SIGNATURE_HEADER = "X-Fedcd-Signature"
TIMESTAMP_HEADER = "X-Fedcd-Timestamp"
EVENT_HEADER = "X-Fedcd-Event"
DELIVERY_HEADER = "X-Fedcd-Delivery"
JOB_FINISHED = "job.finished"
_MAX_BACKOFF_S = 300.0
_RETRIED_STATUS = {408, 425, 429}  # and every 5xx

DELIVERIES = Counter(
    "fedcd_webhook_deliveries_total",
    "Webhook events by tenant and outcome (delivered; failed: every attempt failed, or a final refusal)",
    ["tenant", "outcome"],
)


class WebhookTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # AnyHttpUrl: http and https only (no file:, gopher:, …).
    url: AnyHttpUrl = Field(description="where job events are POSTed")
    secret: SecretStr = Field(min_length=16, description="HMAC-SHA256 key of the signature header")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Fedcd-Signature`` value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(secret: str, timestamp: str, body: bytes, signature: str, *, tolerance_s: float = 300.0,
           now: float | None = None) -> bool:
    """What a receiver checks: the signature matches (constant-time) and the timestamp is recent."""
    try:
        age = abs((time.time() if now is None else now) - int(timestamp))
    except ValueError:
        return False
    return age <= tolerance_s and hmac.compare_digest(sign(secret, timestamp, body), signature)


class _Retry(Exception):
    """A failed attempt worth another: the receiver may be up again later."""


class _Refused(Exception):
    """A final answer (4xx but 408/425/429, a redirect): retrying would get the same."""


class WebhookSender:
    """Sends job events in background tasks; ``transport``: tests may route requests in-process."""

    def __init__(
        self, targets: Mapping[str, WebhookTarget], *, attempts: int = 5, backoff_s: float = 1.0,
        timeout_s: float = 10.0, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.targets, self.attempts, self.backoff_s, self.timeout_s = dict(targets), attempts, backoff_s, timeout_s
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[bool]] = set()

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookSender:
        return cls(settings.webhooks, attempts=settings.webhook_attempts, backoff_s=settings.webhook_backoff_s,
                   timeout_s=settings.webhook_timeout_s)

    @property
    def enabled(self) -> bool:
        return bool(self.targets)

    def target_for(self, tenant: str) -> WebhookTarget | None:
        return self.targets.get(tenant) or self.targets.get("*")

    def job_finished(self, event: Mapping[str, Any]) -> asyncio.Task[bool] | None:
        """Schedule the event's delivery (call on the event loop); returns at once. ``event``: the job's fields,
        ``tenant`` among them."""
        tenant = str(event["tenant"])
        target = self.target_for(tenant)
        if target is None:
            return None
        body = {
            "type": JOB_FINISHED, "delivery_id": uuid.uuid4().hex,
            "created_at": datetime.now(UTC).isoformat(), "tenant": tenant,
            "job": {k: v for k, v in event.items() if k != "tenant"},
        }
        task = asyncio.get_running_loop().create_task(self._deliver(target, tenant, body), name="webhook")
        self._tasks.add(task)  # a strong reference until done (the loop keeps only weak ones)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _deliver(self, target: WebhookTarget, tenant: str, body: dict[str, Any]) -> bool:
        raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff_s, max=_MAX_BACKOFF_S),
            retry=retry_if_exception_type(_Retry),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._post(target, raw, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every attempt failed, or a final refusal: the job is not concerned
            log.warning("webhook %s of tenant %s not delivered: %s", body["delivery_id"], tenant, exc)
            DELIVERIES.labels(tenant, "failed").inc()
            return False
        DELIVERIES.labels(tenant, "delivered").inc()
        return True

    async def _post(self, target: WebhookTarget, raw: bytes, body: dict[str, Any]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False, transport=self._transport)
        timestamp = str(int(time.time()))  # signed afresh on each attempt: a late retry is not "too old"
        headers = {
            "content-type": "application/json", "user-agent": "fedcd-webhooks",
            SIGNATURE_HEADER: sign(target.secret.get_secret_value(), timestamp, raw), TIMESTAMP_HEADER: timestamp,
            EVENT_HEADER: body["type"], DELIVERY_HEADER: body["delivery_id"],
        }
        # Only the status is read: the receiver's body is never read (streamed, then closed unread), so a receiver
        # answering gigabytes costs nothing; and the whole attempt has one deadline, since httpx's timeouts are per
        # operation (a receiver trickling its answer byte by byte would hold a delivery open for ever).
        try:
            async with asyncio.timeout(self.timeout_s):
                request = self._client.build_request("POST", str(target.url), content=raw, headers=headers)
                response = await self._client.send(request, stream=True)
                await response.aclose()
        except TimeoutError as exc:
            raise _Retry(f"no answer within {self.timeout_s:g} s (FEDCD_WEBHOOK_TIMEOUT_S)") from exc
        except httpx.TransportError as exc:  # connection refused, timeout, reset
            raise _Retry(f"{type(exc).__name__}") from exc
        status = response.status_code
        if status >= 500 or status in _RETRIED_STATUS:
            raise _Retry(f"HTTP {status}")
        if not 200 <= status < 300:
            raise _Refused(f"HTTP {status} (not retried)")

    async def drain(self) -> None:
        """Wait for every delivery in flight (tests; a clean shutdown uses :meth:`aclose`)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self, *, grace_s: float = 5.0) -> None:
        """Give deliveries in flight ``grace_s`` to finish, cancel the rest (they are lost: see the module doc)."""
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
