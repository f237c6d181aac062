"""The running federation: entity specs, the built entities, and the pipeline over them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.settings import Settings
from diagnosis import AskAll, AskCalibrated, DiagnosisPipeline, FederationMode, Selective
from providers import (
    CacheKey,
    CacheStore,
    CircuitBreakers,
    CircuitState,
    Entity,
    EntityKind,
    EntitySpec,
    MemoryCacheStore,
    MemoryCircuitStore,
    RedisCacheStore,
    RedisCircuitStore,
    ResponseCached,
    build_entity,
    price_of,
)

__all__ = ["Federation", "ResponseCache", "circuit_breakers", "response_cache"]

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


@dataclass(frozen=True)
class ResponseCache:
    """The response cache (``providers.cache``) and the entity kinds it is put in front of."""

    store: CacheStore
    kinds: frozenset[EntityKind]

    def wrap(self, spec: EntitySpec, entity: Entity) -> Entity:
        return ResponseCached(entity, self.store, key=CacheKey.of(spec)) if spec.kind in self.kinds else entity


def response_cache(settings: Settings) -> ResponseCache | None:
    """The response cache as configured: in Redis when ``redis_url`` is set (shared by every worker), in this
    process otherwise; None when ``cache_enabled`` is off."""
    if not settings.cache_enabled:
        return None
    store: CacheStore = (
        RedisCacheStore(
            settings.redis_url.get_secret_value(), prefix=settings.cache_key_prefix,
            max_entries=settings.cache_max_entries, ttl_s=settings.cache_ttl_s,
        )
        if settings.redis_url is not None
        else MemoryCacheStore(max_entries=settings.cache_max_entries, ttl_s=settings.cache_ttl_s)
    )
    return ResponseCache(store, frozenset(settings.cache_kinds))


def federation_mode(name: str | None, settings: Settings) -> FederationMode:
    """The federation mode ``name`` (``all``/``selective``; None: the server default) as configured. Selective judges
    by the request's posterior intervals, or the uncalibrated posterior's when the aggregation is a mean
    (diagnosis.tiers)."""
    mode = name or settings.federation_default
    if mode not in ("all", "calibrated", "selective"):
        raise ValueError(f"unknown federation mode {mode!r} (use 'all', 'calibrated' or 'selective')")
    if mode == "selective":
        return Selective(threshold=settings.selective_threshold)
    return AskCalibrated() if mode == "calibrated" else AskAll()


class Federation:
    """Built once at start-up from settings; tests pass ready-made entities instead (used as they
    are: no wrappers, no breakers, no cache). Each entity is priced from its spec (``providers.pricing``)."""

    def __init__(
        self,
        specs: list[EntitySpec],
        *,
        entities: Mapping[str, Entity] | None = None,
        seed: int | None = None,
        circuits: CircuitBreakers | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.circuits, self.cache = circuits, cache
        self._guarded: list[str] = []  # entities behind a breaker (built here from their specs)
        if entities is None:
            entities = {s.name: self._build(s, circuits, cache) for s in specs}
            self._guarded = list(entities) if circuits is not None else []
        else:  # ready-made entities are the federation: a declaration of no entity given here counts nowhere
            specs = [s for s in specs if s.name in entities]
        self.specs = {s.name: s for s in specs}
        # An entity passed ready-made without a declaration (tests) is tier 0.
        self.pipeline = DiagnosisPipeline(
            entities, seed=seed, tiers={s.name: s.tier for s in specs}, prices={s.name: price_of(s) for s in specs}
        )
        self._status: dict[str, str] = {}

    @staticmethod
    def _build(spec: EntitySpec, circuits: CircuitBreakers | None, cache: ResponseCache | None) -> Entity:
        entity = build_entity(spec, circuits=circuits)
        # The cache outermost: a hit calls no provider, so it costs no breaker probe, slot or deadline.
        return cache.wrap(spec, entity) if cache is not None else entity

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
        while hasattr(entity, "inner"):  # unwrap ResponseCached / Observed / CircuitBroken / WithDeadline / … / Retrying
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
        if self.cache is not None:
            await self.cache.store.aclose()
