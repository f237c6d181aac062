"""Translate the official SDKs' exceptions into ``providers.errors`` in one place.

openai, anthropic and groq are generated from the same template (Stainless), so their
exception classes share names and shape: ``APIStatusError`` (with ``status_code`` and
``response``), ``APITimeoutError`` ⊂ ``APIConnectionError``, ``APIResponseValidationError``.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from providers.errors import EntityError, EntityParseError, EntityRejected, EntityTimeout, EntityUnavailable

__all__ = ["map_sdk_errors", "parse_retry_after"]

_RETRYABLE_STATUS = {408, 409, 429}


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


@contextmanager
def map_sdk_errors(sdk: ModuleType, entity: str) -> Iterator[None]:
    """Re-raise ``sdk``'s exceptions as ``EntityError``s tagged with ``entity``."""
    try:
        yield
    except EntityError as exc:  # e.g. parse_mastery's EntityParseError, raised untagged
        if not exc.entity:
            exc.entity = entity
        raise
    except sdk.APITimeoutError as exc:
        raise EntityTimeout("request timed out", entity=entity) from exc
    except sdk.APIConnectionError as exc:
        raise EntityUnavailable(f"connection failed: {exc}", entity=entity) from exc
    except sdk.APIResponseValidationError as exc:
        raise EntityParseError(f"malformed response body: {exc}", entity=entity) from exc
    except sdk.APIStatusError as exc:
        status = exc.status_code
        message = f"HTTP {status}: {_short(exc)}"
        if status in _RETRYABLE_STATUS or status >= 500:
            raise EntityUnavailable(
                message, entity=entity, retry_after=parse_retry_after(exc.response.headers), status_code=status
            ) from exc
        raise EntityRejected(message, entity=entity, status_code=status) from exc
    except ValueError as exc:  # e.g. the SDK could not decode a 200 body as JSON
        raise EntityParseError(f"malformed response: {exc}", entity=entity) from exc


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:197] + "..."
