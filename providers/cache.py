"""A response cache for entity answers: the same question to the same model, with the same decoding
settings, is answered once per TTL.

``ResponseCached(inner, store, key=CacheKey.of(spec))`` is an Entity. It sits *beneath* the privacy
wrapper (``diagnosis.pipeline.Privatized``): what it stores is the entity's answer **before**
privatization, and a hit goes through the privacy mechanism afresh, so it is charged like a call —
it saves money and latency, never ε (docs/privacy.md).

Key: (entity name, model, temperature, max_tokens, structured_output, sha256 of the prompt templates'
source — ``providers/prompts.py`` — and of the prompt context). The context holds everything a prompt is
made from (items, concepts, scores, the Q-matrix id, the tenant as cache scope; never a student id), and
the templates' source makes any change to how prompts are rendered a different key, without rendering
the prompt a second time per call (the adapter renders it).

Stored: successful answers only (``ok`` and ``partial``). A failure (any ``EntityError``) is never
stored, so the next identical request asks the entity again. A hit returns the stored answer with
``cache="hit"`` and zero token usage (no provider was called, nothing is billed); a miss returns
the entity's answer with ``cache="miss"``. Identical requests arriving while the first one's call is in
flight (in this process) wait for that call and count as hits; if it fails, each asks the entity itself.

Tags (erasure of a student's data, README "Student data"): the context key is made from a student's responses but
never names the student, so whoever diagnoses a student runs the pipeline under ``tagged_as(tag)`` (a keyed hash
of the student, never the id); every entry stored or hit under it is added to the tag's set, and
``store.forget(tag)`` deletes those entries. A tag lives as long as the newest entry it was put on could.

Stores: :class:`MemoryCacheStore` (this process: least-recently-used eviction beyond ``max_entries``,
entries expire after ``ttl_s``) and ``providers.cache_redis.RedisCacheStore`` (shared by workers). A
store that fails (Redis down) makes the lookup a miss: the entity is asked, the error is logged and
counted in ``fedcd_response_cache_errors_total`` — a broken cache costs money, never an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import Counter

import providers.prompts as prompts
from providers.config import EntitySpec
from providers.types import Entity, EntityPrediction, PromptContext, TokenUsage

__all__ = [
    "CACHE_ERRORS",
    "CACHE_LOOKUPS",
    "CacheKey",
    "CacheStore",
    "CacheStoreUnavailable",
    "MemoryCacheStore",
    "ResponseCached",
    "tagged_as",
]

# The source of the prompt templates, hashed into every key: a template change is a different question.
_PROMPT_TEMPLATES = hashlib.sha256(Path(prompts.__file__).read_bytes()).digest()

log = logging.getLogger("fedcd.cache")

CACHE_LOOKUPS = Counter(
    "fedcd_response_cache_lookups_total", "Response cache lookups by entity and result (hit, miss)", ["entity", "result"]
)
CACHE_ERRORS = Counter(
    "fedcd_response_cache_errors_total", "Response cache store failures (lookup or store; the entity was asked)",
    ["entity"],
)


# The tag of the request being answered (a keyed hash of its student; None: untagged). A ContextVar, so concurrent
# students — a batch, a calibration job — each tag their own entries: asyncio copies it into every task it starts.
_TAG: ContextVar[str | None] = ContextVar("fedcd_cache_tag", default=None)


@contextlib.contextmanager
def tagged_as(tag: str | None) -> Iterator[None]:
    """Entries stored or hit inside this block are added to ``tag`` (module docstring)."""
    token = _TAG.set(tag)
    try:
        yield
    finally:
        _TAG.reset(token)


class CacheStoreUnavailable(RuntimeError):
    """The cache's store could not be read or written (e.g. Redis is down)."""


class CacheStore(Protocol):
    """Bounded key -> text storage with expiry; ``get`` of an expired or evicted key is None."""

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str) -> None: ...

    async def tag(self, tag: str, key: str) -> None: ...

    async def forget(self, tag: str) -> int:
        """Delete every entry ``tag`` holds, and the tag; how many entries the tag held."""
        ...

    async def tagged(self, tag: str) -> int:
        """Entries ``tag`` holds (some may have expired since)."""
        ...

    async def aclose(self) -> None: ...


class MemoryCacheStore:
    """In this process: at most ``max_entries`` (least recently used evicted first), each for ``ttl_s``
    seconds of ``clock`` (monotonic by default; tests inject their own)."""

    def __init__(self, *, max_entries: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError(f"max_entries must be >= 1 and ttl_s > 0, got {max_entries}, {ttl_s}")
        self.max_entries, self.ttl_s, self._clock = max_entries, ttl_s, clock
        self._entries: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._tags: OrderedDict[str, tuple[float, set[str]]] = OrderedDict()  # oldest touch first

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> str | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, value = entry
        if self._clock() >= expires_at:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    async def put(self, key: str, value: str) -> None:
        self._entries[key] = (self._clock() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def tag(self, tag: str, key: str) -> None:
        now = self._clock()
        while self._tags and next(iter(self._tags.values()))[0] <= now:  # expired: none of its entries can remain
            self._tags.popitem(last=False)
        keys = self._tags.pop(tag, (0.0, set()))[1]
        keys.add(key)
        self._tags[tag] = (now + self.ttl_s, keys)

    async def forget(self, tag: str) -> int:
        keys = self._tags.pop(tag, (0.0, set()))[1]
        for key in keys:
            self._entries.pop(key, None)
        return len(keys)

    async def tagged(self, tag: str) -> int:
        entry = self._tags.get(tag)
        return len(entry[1]) if entry is not None and entry[0] > self._clock() else 0

    async def aclose(self) -> None:
        self._entries.clear()
        self._tags.clear()


@dataclass(frozen=True, kw_only=True)
class CacheKey:
    """The parts of an entity's configuration that change its answer to a given prompt."""

    entity: str
    model: str
    temperature: float | None
    max_tokens: int
    structured_output: str

    # Whether the entity's answer depends on PromptContext.own_uncertainty (local-fed's does: it sends its uncertainty
    # only when asked). For every other kind the flag stays out of the key, so a question asked under a posterior and
    # under a stack is one cached answer, and keys stored before the flag existed still hit. Not in the digest.
    keys_own_uncertainty: bool = False

    @classmethod
    def of(cls, spec: EntitySpec) -> CacheKey:
        return cls(
            entity=spec.name, model=spec.model, temperature=spec.temperature, max_tokens=spec.max_tokens,
            structured_output=spec.structured_output, keys_own_uncertainty=spec.kind == "local_fed",
        )

    @cached_property
    def _configuration_digest(self) -> Any:
        """The hash state after this key's configuration and the prompt templates: copied per call."""
        configuration = {k: v for k, v in asdict(self).items() if k != "keys_own_uncertainty"}
        digest = hashlib.sha256(json.dumps(configuration, sort_keys=True).encode())
        digest.update(b"\x1e" + _PROMPT_TEMPLATES)
        return digest

    def for_context(self, context: PromptContext) -> str:
        digest = self._configuration_digest.copy()
        asked = context.model_dump_json() if self.keys_own_uncertainty else context.question_json()
        digest.update(b"\x1e" + asked.encode())  # pydantic's JSON: fields in declared order
        return f"{self.entity}:{digest.hexdigest()}"


class ResponseCached:
    """Answers from ``store`` when it holds this question's answer; otherwise asks ``inner`` and stores it."""

    def __init__(self, inner: Entity, store: CacheStore, *, key: CacheKey) -> None:
        if key.entity != inner.name:
            raise ValueError(f"cache key of entity '{key.entity}' given for entity '{inner.name}'")
        self.inner, self.store, self.key = inner, store, key
        self.name = inner.name
        # key -> the answer of the call in flight for it (None if that call failed)
        self._in_flight: dict[str, asyncio.Future[EntityPrediction | None]] = {}

    async def respond(self, context: PromptContext) -> EntityPrediction:
        key = self.key.for_context(context)
        stored = await self._lookup(key)
        while stored is None and key in self._in_flight:  # a failed call in flight: the next waiter asks
            stored = await asyncio.shield(self._in_flight[key])
        if stored is not None:
            CACHE_LOOKUPS.labels(self.name, "hit").inc()
            await self._tag(key)
            return stored.model_copy(update={"cache": "hit", "usage": TokenUsage(), "attempts": 0, "latency_ms": 0.0})
        CACHE_LOOKUPS.labels(self.name, "miss").inc()
        answered: asyncio.Future[EntityPrediction | None] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = answered
        prediction = None
        try:
            prediction = await self.inner.respond(context)  # an EntityError propagates: failures are never stored
            try:
                await self.store.put(key, prediction.model_dump_json())
            except CacheStoreUnavailable as exc:
                self._store_failed(exc)
            else:
                await self._tag(key)
        finally:
            answered.set_result(prediction)
            if self._in_flight.get(key) is answered:
                del self._in_flight[key]
        return prediction.model_copy(update={"cache": "miss"})

    async def _lookup(self, key: str) -> EntityPrediction | None:
        try:
            stored = await self.store.get(key)
        except CacheStoreUnavailable as exc:
            self._store_failed(exc)
            return None
        return EntityPrediction.model_validate_json(stored) if stored is not None else None

    async def _tag(self, key: str) -> None:
        tag = _TAG.get()
        if tag is None:
            return
        try:
            await self.store.tag(tag, key)
        except CacheStoreUnavailable as exc:
            self._store_failed(exc)

    def _store_failed(self, exc: CacheStoreUnavailable) -> None:
        CACHE_ERRORS.labels(self.name).inc()
        log.warning("response cache of %s unavailable, asking the entity: %s", self.name, exc)

    async def aclose(self) -> None:
        await self.inner.aclose()
