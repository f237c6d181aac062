"""The errors the layers below the routes raise (services, jobs, stores, limits), in the domain's words: what is wrong
and with which input field — never an HTTP status, nor where in a request the field was sent. ``app.errors`` maps
each to its response in one place: the status by class, and the ``loc`` of the field under ``path``, ``query`` or
``body``, as the route received it.

    DomainError            (field, messages, details)
    ├── InvalidInput       an input breaks a rule                                 → 422
    ├── NotFound           an id names nothing the tenant has                     → 404
    ├── Conflict           the request clashes with what is stored or running     → 409
    ├── Unavailable        nothing can answer it now                              → 503
    └── GroupBudgetSpent   a group release would overspend a student's budget     → 429 with Retry-After
    TryLater               the same request will be answered shortly              → 503 with Retry-After

``field`` is the offending input's path within the request (``("records", 3, "truth")``; ``()``: the whole input).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from privacy import BudgetExceeded

__all__ = ["NO_RENEWAL_RETRY_AFTER_S", "Conflict", "DomainError", "GroupBudgetSpent", "InvalidInput", "NotFound",
           "TryLater", "Unavailable", "budget_retry_after"]

# Retry-After of a budget that does not renew (a lifetime cap): only an admin's policy change can free it, and a
# client that retries on its own should not come back sooner.
NO_RENEWAL_RETRY_AFTER_S = 86400


class DomainError(Exception):
    """A request refused for a reason its caller can act on; ``details`` are more facts about it (e.g. the unknown
    item ids), sent with each message."""

    # When the same request may be answered (seconds, at least 1); None: nothing says it will be.
    retry_after_s: int | None = None

    def __init__(self, field: Sequence[str | int], messages: Sequence[str], *,
                 details: Mapping[str, Any] | None = None) -> None:
        self.field, self.messages, self.details = tuple(field), list(messages), dict(details or {})
        super().__init__("; ".join(messages))


class InvalidInput(DomainError):
    """An input breaks a rule: a limit, an unknown item, a value the settings forbid."""


class NotFound(DomainError):
    """An id names nothing the tenant has (another tenant's is unknown too, never forbidden)."""


class Conflict(DomainError):
    """The request clashes with what is stored or running: a built-in Q-matrix, an id in use, a finished job, work in
    flight that holds the student."""


class Unavailable(DomainError):
    """Nothing can answer the request now (no student could be diagnosed; the serving model is not usable)."""


class GroupBudgetSpent(DomainError):
    """A group release (a cohort report) would overspend some student's privacy budget; nothing was released."""

    def __init__(self, field: Sequence[str | int], messages: Sequence[str], *, retry_after_s: int) -> None:
        super().__init__(field, messages)
        self.retry_after_s = retry_after_s  # when the budget renews (seconds, at least 1)


class TryLater(Exception):
    """The request cannot be answered now, but the same request will be (after ``retry_after_s``)."""

    def __init__(self, message: str, *, retry_after_s: int = 5) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


def budget_retry_after(exc: BudgetExceeded, *, now: float | None = None) -> int:
    """Seconds until a spent privacy budget renews (rounded up, at least 1), or :data:`NO_RENEWAL_RETRY_AFTER_S`
    when it does not renew."""
    if exc.renews_at is None or not math.isfinite(exc.renews_at):
        return NO_RENEWAL_RETRY_AFTER_S
    return max(1, math.ceil(exc.renews_at - (time.time() if now is None else now)))
