"""One error tree for every entity backend.

::

    EntityError                      anything that stops an entity answering one request
    ├── EntityUnavailable            transient: rate limit, 5xx, timeout, connection (retryable)
    │   └── EntityTimeout            the call or the per-entity deadline ran out
    ├── EntityRejected               the backend refused the request (4xx other than 408/409/429)
    ├── EntityParseError             the backend answered, but nothing usable could be read from it
    ├── EntityCircuitOpen            not asked: the entity's circuit breaker is open after consecutive
    │                                failed calls (``providers.circuit``)
    └── EntitySkipped                the entity cannot serve this request at all (e.g. no model for its
                                     Q-matrix): not a failure, nothing released, never retried

Each class has a short ``code`` (``unavailable``, ``timeout``, ``rejected``, ``parse_error``,
``circuit_open``, ``skipped``): the reason class API responses and metrics name.

Each adapter converts its SDK's exceptions into this tree in one context manager, so
retry policy (``providers.wrappers``) and the HTTP layer (``app``) see only these.

``usage`` is what the provider billed before the failure: an answer that could not be read
(``EntityParseError``) used tokens; ``Retrying`` sums it over the attempts. 0 when nothing was
reported (a timeout, a connection error, a refusal).

Messages go to logs and API responses and often quote the provider, whose text is untrusted:
every ``EntityError`` passes its message (and ``EntityParseError`` its excerpt) through
:func:`providers.untrusted.scrub_untrusted_text`, which redacts anything that looks like a
credential and bounds the length.
"""

from __future__ import annotations

from typing import ClassVar

from providers.types import TokenUsage
from providers.untrusted import scrub_untrusted_text

__all__ = [
    "EntityCircuitOpen",
    "EntityError",
    "EntityParseError", "EntityRejected",
    "EntitySkipped",
    "EntityTimeout",
    "EntityUnavailable",
]


class EntityError(Exception):
    """Base class. ``entity`` names the entity; the message is safe to show to an API client (scrubbed)."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str, *, entity: str = "") -> None:
        super().__init__(scrub_untrusted_text(message))
        self.entity = entity
        self.usage = TokenUsage()

    @property
    def reason(self) -> str:
        return f"{type(self).__name__}: {self}"


class EntityUnavailable(EntityError):
    """Transient failure; worth retrying. ``retry_after`` is the server's hint in seconds, if any."""

    code: ClassVar[str] = "unavailable"

    def __init__(
        self, message: str, *, entity: str = "", retry_after: float | None = None, status_code: int | None = None
    ) -> None:
        super().__init__(message, entity=entity)
        self.retry_after = retry_after
        self.status_code = status_code


class EntityTimeout(EntityUnavailable):
    """The backend did not answer in time."""

    code: ClassVar[str] = "timeout"


class EntityRejected(EntityError):
    """The backend refused the request (bad key, bad model, bad request): retrying will not help."""

    code: ClassVar[str] = "rejected"

    def __init__(self, message: str, *, entity: str = "", status_code: int | None = None) -> None:
        super().__init__(message, entity=entity)
        self.status_code = status_code


class EntityParseError(EntityError):
    """The answer could not be turned into a valid mastery vector (after the documented repairs)."""

    code: ClassVar[str] = "parse_error"

    def __init__(self, message: str, *, entity: str = "", raw_excerpt: str = "") -> None:
        super().__init__(message, entity=entity)
        # A short excerpt for debugging; it holds model output, never student identifiers.
        self.raw_excerpt = scrub_untrusted_text(raw_excerpt, limit=200) if raw_excerpt else ""


class EntitySkipped(EntityError):
    """The entity has nothing to offer for this request (e.g. ``local-fed`` has no model for its
    Q-matrix). The pipeline reports it as ``skipped`` with the message as the reason: it is not
    a failure, it released nothing, and retrying cannot help."""

    code: ClassVar[str] = "skipped"


class EntityCircuitOpen(EntityError):
    """The entity was not asked: its circuit breaker is open (too many consecutive failed calls), or
    another caller holds the one half-open probe. ``retry_at`` (epoch seconds) is when a probe may
    next be tried. A failure for this request, released nothing, costs no time."""

    code: ClassVar[str] = "circuit_open"

    def __init__(self, message: str, *, entity: str = "", retry_at: float) -> None:
        super().__init__(message, entity=entity)
        self.retry_at = retry_at
