"""The running federation: entity specs, the built entities, and the pipeline over them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from app.settings import Settings
from diagnosis import DiagnosisPipeline
from providers import (
    CircuitBreakers,
    CircuitState,
    Entity,
    EntitySpec,
    MemoryCircuitStore,
    RedisCircuitStore,
    build_entity,
)

__all__ = ["Federation", "circuit_breakers"]

log = logging.getLogger("fedcd.federation")


def circuit_breakers(settings: Settings) -> CircuitBreakers | None:
    """The entities' circuit breakers as configured: shared through Redis when ``redis_url`` is set,
    in this process otherwise; None when ``circuit_failure_threshold`` is null."""
    if settings.circuit_failure_threshold is None:
        return None
    store = (
        RedisCircuitStore(settings.redis_url.get_secret_value(), prefix=settings.circuit_key_prefix)
        if settings.redis_url is not None
        else MemoryCircuitStore()
    )
    return CircuitBreakers(
        store, failure_threshold=settings.circuit_failure_threshold, reset_timeout_s=settings.circuit_reset_timeout_s
    )


class Federation:
    """Built once at start-up from settings; tests pass ready-made entities instead (used as they
    are: no wrappers, no breakers)."""

    def __init__(
        self,
        specs: list[EntitySpec],
        *,
        entities: Mapping[str, Entity] | None = None,
        seed: int | None = None,
        circuits: CircuitBreakers | None = None,
    ) -> None:
        self.specs = {s.name: s for s in specs}
        self.circuits = circuits
        self._guarded: list[str] = []  # entities behind a breaker (built here from their specs)
        if entities is None:
            entities = {s.name: build_entity(s, circuits=circuits) for s in specs}
            self._guarded = list(entities) if circuits is not None else []
        # An entity passed ready-made without a declaration (tests) is tier 0.
        self.pipeline = DiagnosisPipeline(entities, seed=seed, tiers={s.name: s.tier for s in specs})
        self._status: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        return list(self.pipeline.entities)

    def deadline_s(self, names: Sequence[str] | None) -> float | None:
        """The longest ``deadline_s`` of the named entities (all when None) that have a declaration: a whole
        request's default deadline. None when none has one (entities passed ready-made)."""
        chosen = self.names if names is None else names
        deadlines = [self.specs[n].deadline_s for n in chosen if n in self.specs]
        return max(deadlines) if deadlines else None

    def adapter(self, name: str) -> object:
        entity: object = self.pipeline.entities[name]
        while hasattr(entity, "inner"):  # unwrap Observed / CircuitBroken / WithDeadline / ConcurrencyLimited / Retrying
            entity = entity.inner
        return entity

    def status(self, name: str) -> str:
        if name in self._status:
            return self._status[name]
        adapter = self.adapter(name)
        if hasattr(adapter, "loaded"):
            return "ready" if adapter.loaded else "not_loaded"
        return "configured"

    async def preload(self) -> None:
        """Load embedded models now (in worker threads) so the first request does not wait."""
        for name in self.names:
            adapter = self.adapter(name)
            if hasattr(adapter, "load"):
                self._status[name] = "loading"
                try:
                    await asyncio.to_thread(adapter.load)
                    self._status.pop(name, None)
                    log.info("entity %s: model loaded", name)
                except Exception as exc:  # a broken model must not stop the other entities
                    self._status[name] = f"error: {exc}"
                    log.error("entity %s: model failed to load: %s", name, exc)

    async def circuit_states(self) -> dict[str, CircuitState]:
        """Each breaker-guarded entity's circuit state (raises ``CircuitStoreUnavailable``)."""
        if self.circuits is None or not self._guarded:
            return {}
        return await self.circuits.states(self._guarded)

    async def aclose(self) -> None:
        await self.pipeline.aclose()
        if self.circuits is not None:
            await self.circuits.aclose()
