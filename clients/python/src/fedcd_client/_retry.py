"""When the client retries a request and how long it waits first: a value (:class:`RetryPolicy`), apart from the
code that sleeps, so tests read the decisions without sleeping.

Retried:

* a 429 that is not a privacy-budget refusal — the gateway's ``type: rate_limit``, or a proxy's — after
  ``Retry-After`` (any method: the gateway refuses before doing anything);
* 503 with ``Retry-After`` (the server's "try later": the same request will be answered), after it;
* a connection that could not be made (nothing reached the server), with backoff;
* a read timeout, a dropped connection, 502 or 504 — only for idempotent methods: a ``POST /v1/diagnose`` that may
  have been answered is not sent twice behind the caller's back.

Never retried: a 429 ``type: privacy_budget`` (the budget renews in hours, a day, or never — the caller must know),
a 503 without ``Retry-After`` (every entity failed: asking again costs entity calls, the caller decides), any other
4xx. A ``Retry-After`` longer than ``max_wait_s`` is not waited out: the error is raised at once, carrying it.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from fedcd_client._errors import is_privacy_budget, parse_retry_after

__all__ = ["RetryPolicy"]

_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_GATEWAY_STATUSES = frozenset({502, 504})  # a proxy in front of the gateway


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """``max_retries``: retries after the first attempt; ``max_wait_s``: the longest ``Retry-After`` waited out;
    ``backoff_s``: the first wait when the server gave no hint, doubled each retry up to ``max_backoff_s``."""

    max_retries: int = 3
    max_wait_s: float = 30.0
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.max_wait_s < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("RetryPolicy values must be >= 0")

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (0-based) when the server said nothing."""
        return min(self.max_backoff_s, self.backoff_s * 2.0**retry)

    def after_response(self, retry: int, method: str, response: httpx.Response) -> float | None:
        """Seconds to wait before retrying this (read) response, or ``None``: do not retry."""
        if retry >= self.max_retries:
            return None
        status = response.status_code
        hinted = parse_retry_after(response.headers.get("retry-after"))
        if status == 429:
            if is_privacy_budget(_json_or_none(response)):
                return None
            return self._hinted(hinted, retry)
        if status == 503:
            return None if hinted is None else self._hinted(hinted, retry)
        if status in _GATEWAY_STATUSES and method.upper() in _IDEMPOTENT:
            return self.backoff(retry)
        return None

    def after_error(self, retry: int, method: str, error: httpx.TransportError) -> float | None:
        """Seconds to wait before retrying after a transport error, or ``None``."""
        if retry >= self.max_retries:
            return None
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return self.backoff(retry)  # the request never left: safe for any method
        return self.backoff(retry) if method.upper() in _IDEMPOTENT else None

    def _hinted(self, hinted: float | None, retry: int) -> float | None:
        if hinted is None:
            return self.backoff(retry)
        return hinted if hinted <= self.max_wait_s else None


def _json_or_none(response: httpx.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return None
