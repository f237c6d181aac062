"""Translate the official SDKs' exceptions into ``providers.errors`` in one place.

openai, anthropic and groq are generated from the same template (Stainless), so their
exception classes share names and shape: ``APIStatusError`` (with ``status_code`` and
``response``), ``APITimeoutError`` ⊂ ``APIConnectionError``, ``APIResponseValidationError``.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC
from types import ModuleType
from typing import Any

from providers.errors import EntityError, EntityParseError, EntityRejected, EntityTimeout, EntityUnavailable

__all__ = ["MAX_RETRY_AFTER_S", "map_sdk_errors", "parse_retry_after"]

_RETRYABLE_STATUS = {408, 409, 429}
# A hint longer than this is capped: it is still "longer than any retry policy waits" (the policy
# then gives up at once), but a 1e308 or an HTTP date in the year 9999 never flows on as a number.
MAX_RETRY_AFTER_S = 86_400.0


def _seconds(value: object, scale: float) -> float | None:
    """A non-negative finite number of seconds from a header value, or None (not a number)."""
    if not isinstance(value, str | bytes):
        return None
    try:
        number = float(value) * scale
    except ValueError:
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return min(number, MAX_RETRY_AFTER_S)


def _http_date_seconds(value: object, now: Callable[[], float]) -> float | None:
    """Seconds from now until an HTTP date (RFC 9110: IMF-fixdate, RFC 850 or asctime), or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed is None:  # older Pythons return None instead of raising
        return None
    if parsed.tzinfo is None:  # "-0000" parses naive; HTTP dates are always GMT
        parsed = parsed.replace(tzinfo=UTC)
    try:
        delay = parsed.timestamp() - now()
    except (OverflowError, ValueError, OSError):
        return None
    return min(max(0.0, delay), MAX_RETRY_AFTER_S)


def parse_retry_after(headers: Any, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date); never raises.

    A value that cannot be read ("soon", a negative or non-finite number, a malformed date) means
    *no hint*, exactly as if the header were absent: the retry policy then uses its own backoff.
    A date in the past means 0; anything above ``MAX_RETRY_AFTER_S`` is capped to it.
    """
    if headers is None:
        return None
    try:
        ms, value = headers.get("retry-after-ms"), headers.get("retry-after")
    except Exception:  # noqa: BLE001 - a hint is optional; odd header containers must not fail a call
        return None
    from_ms = _seconds(ms, 1e-3) if ms else None
    if from_ms is not None:
        return from_ms
    if not value:
        return None
    seconds = _seconds(value.strip() if isinstance(value, str) else value, 1.0)
    return seconds if seconds is not None else _http_date_seconds(value, now)


@contextmanager
def map_sdk_errors(sdk: ModuleType, entity: str) -> Iterator[None]:
    """Re-raise ``sdk``'s exceptions as ``EntityError``s tagged with ``entity``.

    The SDK exception is not chained (``from None``): its text quotes the provider's reply, which
    may echo credentials, and a traceback would print it in full. The ``EntityError`` message
    keeps the useful part, scrubbed (``providers.untrusted``).
    """
    try:
        yield
    except EntityError as exc:  # e.g. parse_mastery's EntityParseError, raised untagged
        if not exc.entity:
            exc.entity = entity
        raise
    except sdk.APITimeoutError:
        raise EntityTimeout("request timed out", entity=entity) from None
    except sdk.APIConnectionError as exc:
        raise EntityUnavailable(f"connection failed: {_describe(exc)}", entity=entity) from None
    except sdk.APIResponseValidationError as exc:
        raise EntityParseError(f"malformed response body: {exc}", entity=entity) from None
    except sdk.APIStatusError as exc:
        status = exc.status_code
        message = f"HTTP {status}: {exc}"
        if status in _RETRYABLE_STATUS or status >= 500:
            raise EntityUnavailable(
                message, entity=entity, retry_after=parse_retry_after(exc.response.headers), status_code=status
            ) from None
        raise EntityRejected(message, entity=entity, status_code=status) from None
    except ValueError as exc:  # e.g. the SDK could not decode a 200 body as JSON
        raise EntityParseError(f"malformed response: {exc}", entity=entity) from None


def _describe(exc: BaseException) -> str:
    """The SDK's message plus its underlying cause (e.g. "Connection error. (ReadError: …)")."""
    cause = exc.__cause__ or exc.__context__
    return f"{exc} ({type(cause).__name__}: {cause})" if cause is not None else str(exc)
