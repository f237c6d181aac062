"""Prometheus metrics of entity calls, kept in one place: the ``Observed`` wrapper (outermost in
``build_chain``) and the retry hook ``Retrying`` calls before each wait.

Labels are entity names (from configuration), reason classes (``EntityError.code``) and repair
rules (``providers.parsing``): a bounded set, never request content. The circuit state is read
from the breakers' store when ``/metrics`` is scraped (``app.metrics``), not kept here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import Counter, Histogram

from providers.errors import EntityError, EntitySkipped
from providers.types import Entity, EntityPrediction, PromptContext

__all__ = ["ENTITY_CALLS", "ENTITY_FAILURES", "ENTITY_REPAIRS", "ENTITY_RETRIES", "Observed", "retry_counter"]

# From a local classifier (milliseconds) to a hosted LLM at its 90 s deadline.
_CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 90, 120)

ENTITY_CALLS = Histogram(
    "fedcd_entity_call_duration_seconds",
    "One call to an entity, retries and queueing included, by outcome (ok, partial, failed, skipped)",
    ["entity", "outcome"],
    buckets=_CALL_BUCKETS,
)
ENTITY_FAILURES = Counter(
    "fedcd_entity_failures_total",
    "Failed entity calls by reason class (unavailable, timeout, rejected, parse_error, circuit_open)",
    ["entity", "reason"],
)
ENTITY_RETRIES = Counter(
    "fedcd_entity_retries_total", "Attempts repeated after a retryable failure, by that failure's reason class",
    ["entity", "reason"],
)
ENTITY_REPAIRS = Counter(
    "fedcd_entity_repairs_total", "Repairs applied to entities' answers, by parse repair rule", ["entity", "rule"]
)


class Observed:
    """Times and counts every call of the wrapped entity."""

    def __init__(self, inner: Entity) -> None:
        self.inner = inner
        self.name = inner.name

    async def respond(self, context: PromptContext) -> EntityPrediction:
        start = time.perf_counter()
        try:
            prediction = await self.inner.respond(context)
        except EntitySkipped:
            ENTITY_CALLS.labels(self.name, "skipped").observe(time.perf_counter() - start)
            raise
        except EntityError as exc:
            ENTITY_CALLS.labels(self.name, "failed").observe(time.perf_counter() - start)
            ENTITY_FAILURES.labels(self.name, exc.code).inc()
            raise
        ENTITY_CALLS.labels(self.name, prediction.status).observe(time.perf_counter() - start)
        for repair in prediction.repairs:
            ENTITY_REPAIRS.labels(self.name, repair.rule).inc()
        return prediction

    async def aclose(self) -> None:
        await self.inner.aclose()


def retry_counter(entity: str) -> Callable[[BaseException], None]:
    """The hook ``Retrying`` calls with the failure it is about to retry."""

    def count(exc: BaseException) -> None:
        ENTITY_RETRIES.labels(entity, exc.code if isinstance(exc, EntityError) else type(exc).__name__).inc()

    return count
