"""The running federation: entity specs, the built entities, and the pipeline over them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from diagnosis import DiagnosisPipeline
from providers import Entity, EntitySpec, build_entity

__all__ = ["Federation"]

log = logging.getLogger("fedcd.federation")


class Federation:
    """Built once at start-up from settings; tests pass ready-made entities instead."""

    def __init__(
        self,
        specs: list[EntitySpec],
        *,
        entities: Mapping[str, Entity] | None = None,
        seed: int | None = None,
    ) -> None:
        self.specs = {s.name: s for s in specs}
        if entities is None:
            entities = {s.name: build_entity(s) for s in specs}
        self.pipeline = DiagnosisPipeline(entities, seed=seed)
        self._status: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        return list(self.pipeline.entities)

    def adapter(self, name: str) -> object:
        entity: object = self.pipeline.entities[name]
        while hasattr(entity, "inner"):  # unwrap ConcurrencyLimited / WithDeadline / Retrying
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

    async def aclose(self) -> None:
        await self.pipeline.aclose()
