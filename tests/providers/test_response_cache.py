"""The response cache: keyed by entity, model, decoding settings and prompt; bounded by TTL and size; never
stores failures; a hit beneath the privacy wrapper is privatized afresh. In memory and in the real Redis."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import asdict

import pytest
from prometheus_client import REGISTRY

from diagnosis import DiagnosisPipeline, DiagnosisRequest
from providers import (
    CacheKey,
    CacheStoreUnavailable,
    EntityPrediction,
    EntityUnavailable,
    MemoryCacheStore,
    PromptContext,
    PromptItem,
    RedisCacheStore,
    ResponseCached,
    TokenUsage,
)
from providers.cache import _PROMPT_TEMPLATES
from qmatrix import Response, example_qmatrix
from tests.factories import FakeEntity
from tests.shared_redis import REDIS_URL


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Metered(FakeEntity):
    """A FakeEntity that reports token usage, and fails its first ``failures`` calls."""

    def __init__(self, name: str, *, failures: int = 0, delay_s: float = 0.0) -> None:
        super().__init__(name, 0.5, delay_s=delay_s)
        self.failures, self.delay_s = failures, delay_s

    async def respond(self, context: PromptContext) -> EntityPrediction:
        if self.failures > 0:
            self.failures -= 1
            self.contexts.append(context)
            await asyncio.sleep(self.delay_s)
            raise EntityUnavailable("HTTP 503", entity=self.name)
        prediction = await super().respond(context)
        return prediction.model_copy(update={"usage": TokenUsage(prompt_tokens=120, completion_tokens=20)})


def _key(name: str = "m", **changes: object) -> CacheKey:
    values: dict[str, object] = {"entity": name, "model": "model-a", "temperature": 0.7, "max_tokens": 512,
                                 "structured_output": "json_schema", **changes}
    return CacheKey(**values)  # type: ignore[arg-type]


def _context(score: float = 1.0) -> PromptContext:
    item = PromptItem(item_id="q1", text="2 + 2?", concepts=("addition",), score=score)
    return PromptContext(concepts=("addition",), items=(item,))


def _lookups(entity: str, result: str) -> float:
    labels = {"entity": entity, "result": result}
    return REGISTRY.get_sample_value("fedcd_response_cache_lookups_total", labels) or 0.0


# -- the in-process store ------------------------------------------------------------------------------
def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    store = MemoryCacheStore(max_entries=10, ttl_s=60.0, clock=clock)
    asyncio.run(store.put("k", "v"))
    clock.now = 59.9
    assert asyncio.run(store.get("k")) == "v"
    clock.now = 60.0
    assert asyncio.run(store.get("k")) is None
    assert len(store) == 0


def test_the_least_recently_used_entry_goes_first_beyond_the_size_bound() -> None:
    store = MemoryCacheStore(max_entries=2, ttl_s=60.0, clock=Clock())

    async def run() -> list[str | None]:
        await store.put("a", "1")
        await store.put("b", "2")
        await store.get("a")  # a is now more recent than b
        await store.put("c", "3")
        return [await store.get(k) for k in ("a", "b", "c")]

    assert asyncio.run(run()) == ["1", None, "3"]
    assert len(store) == 2


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        MemoryCacheStore(max_entries=0, ttl_s=1.0)
    with pytest.raises(ValueError):
        MemoryCacheStore(max_entries=1, ttl_s=0.0)


# -- the wrapper ---------------------------------------------------------------------------------------
def test_an_identical_question_is_answered_from_the_cache_without_tokens() -> None:
    # Prepare
    inner = Metered("m")
    cached = ResponseCached(inner, MemoryCacheStore(max_entries=10, ttl_s=60.0), key=_key())
    hits_before, misses_before = _lookups("m", "hit"), _lookups("m", "miss")

    # Execute
    async def run() -> tuple[EntityPrediction, EntityPrediction]:
        return await cached.respond(_context()), await cached.respond(_context())

    first, second = asyncio.run(run())
    # Assert
    assert len(inner.contexts) == 1
    assert (first.cache, first.usage.prompt_tokens) == ("miss", 120)
    assert (second.cache, second.usage) == ("hit", TokenUsage())
    assert second.mastery == first.mastery
    assert (_lookups("m", "hit") - hits_before, _lookups("m", "miss") - misses_before) == (1, 1)


def test_another_prompt_or_decoding_setting_is_another_key() -> None:
    base = _key()
    assert base.for_context(_context(1.0)) == _key().for_context(_context(1.0))
    assert base.for_context(_context(1.0)) != base.for_context(_context(0.0))
    for change in ({"model": "model-b"}, {"temperature": 0.0}, {"max_tokens": 64}, {"structured_output": "none"}):
        assert _key(**change).for_context(_context()) != base.for_context(_context()), change
    assert _key("other").for_context(_context()) != base.for_context(_context())


def test_whether_the_aggregation_reads_uncertainty_keys_only_an_entity_whose_answer_depends_on_it() -> None:
    # An LLM's answer is the same under a posterior and a stack: one key, and the key an answer cached before the
    # flag existed was stored under; local-fed sends its uncertainty only when asked: two keys.
    wants, without = _context(), _context().model_copy(update={"own_uncertainty": False})
    llm, local = _key(), _key(keys_own_uncertainty=True)
    assert llm.for_context(wants) == llm.for_context(without)
    assert local.for_context(wants) != local.for_context(without)
    digest = hashlib.sha256(json.dumps({k: v for k, v in asdict(llm).items() if k != "keys_own_uncertainty"},
                                       sort_keys=True).encode())
    digest.update(b"\x1e" + _PROMPT_TEMPLATES + b"\x1e" + wants.model_dump_json(exclude={"own_uncertainty"}).encode())
    assert llm.for_context(wants) == f"{llm.entity}:{digest.hexdigest()}"


def test_failures_are_never_cached() -> None:
    # Prepare: the entity fails once, then answers
    inner = Metered("flaky", failures=1)
    cached = ResponseCached(inner, MemoryCacheStore(max_entries=10, ttl_s=60.0), key=_key("flaky"))

    async def run() -> list[str | None]:
        with pytest.raises(EntityUnavailable):
            await cached.respond(_context())
        return [(await cached.respond(_context())).cache, (await cached.respond(_context())).cache]

    # Execute / Assert: the failure was not stored, so the entity is asked again
    assert asyncio.run(run()) == ["miss", "hit"]
    assert len(inner.contexts) == 2


def test_concurrent_identical_questions_share_one_call() -> None:
    # Prepare: a slow entity
    inner = Metered("slow", delay_s=0.05)
    cached = ResponseCached(inner, MemoryCacheStore(max_entries=10, ttl_s=60.0), key=_key("slow"))

    async def run() -> list[str | None]:
        answers = await asyncio.gather(*(cached.respond(_context()) for _ in range(4)))
        return sorted(str(a.cache) for a in answers)

    # Execute / Assert
    assert asyncio.run(run()) == ["hit", "hit", "hit", "miss"]
    assert len(inner.contexts) == 1


def test_when_the_call_in_flight_fails_the_waiting_questions_ask_themselves() -> None:
    # Prepare: the first call fails (after a while); the next ones answer
    inner = Metered("flaky-slow", failures=1, delay_s=0.05)
    cached = ResponseCached(inner, MemoryCacheStore(max_entries=10, ttl_s=60.0), key=_key("flaky-slow"))

    async def run() -> list[object]:
        return list(await asyncio.gather(*(cached.respond(_context()) for _ in range(3)), return_exceptions=True))

    # Execute
    first, *waiting = asyncio.run(run())
    # Assert: the failure reached its own caller only; of the two waiting, one asked and the other shared that
    assert isinstance(first, EntityUnavailable)
    assert sorted(str(w.cache) for w in waiting) == ["hit", "miss"]  # type: ignore[union-attr]
    assert len(inner.contexts) == 2


def test_a_key_for_another_entity_is_refused() -> None:
    with pytest.raises(ValueError, match="cache key of entity 'x'"):
        ResponseCached(Metered("m"), MemoryCacheStore(max_entries=1, ttl_s=1.0), key=_key("x"))


def test_hits_beneath_the_privacy_wrapper_are_privatized_afresh() -> None:
    # Prepare: one cached entity, three students with the same responses (the same prompt)
    inner = Metered("m")
    pipeline = DiagnosisPipeline(
        {"m": ResponseCached(inner, MemoryCacheStore(max_entries=10, ttl_s=60.0), key=_key())}, seed=7
    )
    responses = [Response(item_id="q01", correct=True), Response(item_id="q03", correct=False)]

    async def run() -> list[object]:
        return [
            (await pipeline.diagnose(DiagnosisRequest(student_id=s, qmatrix=example_qmatrix(), responses=responses,
                                                      epsilon=4.0))).entities[0]
            for s in ("s1", "s2", "s3")
        ]

    # Execute
    first, second, third = asyncio.run(run())
    # Assert: asked once; both hits released with fresh noise (different values)
    assert len(inner.contexts) == 1
    assert [o.cache for o in (first, second, third)] == ["miss", "hit", "hit"]  # type: ignore[attr-defined]
    assert second.mastery != third.mastery != first.mastery  # type: ignore[attr-defined]


# -- Redis ---------------------------------------------------------------------------------------------
def test_redis_shares_answers_between_workers(redis_prefix: str) -> None:
    # Prepare: two stores on one prefix, as two gateway workers
    async def run() -> tuple[list[str | None], int]:
        one = RedisCacheStore(REDIS_URL, prefix=redis_prefix, max_entries=10, ttl_s=60.0)
        two = RedisCacheStore(REDIS_URL, prefix=redis_prefix, max_entries=10, ttl_s=60.0)
        inner = Metered("m")
        try:
            first = await ResponseCached(inner, one, key=_key()).respond(_context())
            second = await ResponseCached(inner, two, key=_key()).respond(_context())
            return [first.cache, second.cache], len(inner.contexts)
        finally:
            await one.aclose()
            await two.aclose()

    # Execute / Assert
    assert asyncio.run(run()) == (["miss", "hit"], 1)


def test_redis_entries_expire_after_the_ttl(redis_prefix: str) -> None:
    async def run() -> tuple[str | None, str | None]:
        store = RedisCacheStore(REDIS_URL, prefix=redis_prefix, max_entries=10, ttl_s=0.3)
        try:
            await store.put("k", "v")
            fresh = await store.get("k")
            await asyncio.sleep(0.5)
            return fresh, await store.get("k")
        finally:
            await store.aclose()

    assert asyncio.run(run()) == ("v", None)


def test_redis_keeps_at_most_max_entries_dropping_the_oldest(redis_prefix: str) -> None:
    async def run() -> tuple[list[str | None], int]:
        store = RedisCacheStore(REDIS_URL, prefix=redis_prefix, max_entries=3, ttl_s=60.0)
        try:
            for n in range(5):
                await store.put(f"k{n}", str(n))
                await asyncio.sleep(0.002)  # distinct write times
            return [await store.get(f"k{n}") for n in range(5)], await store.size()
        finally:
            await store.aclose()

    assert asyncio.run(run()) == ([None, None, "2", "3", "4"], 3)


def test_an_unreachable_redis_makes_a_miss_counted_as_an_error() -> None:
    # Prepare: nothing listens on port 1
    name = f"m-{time.monotonic_ns()}"

    async def run() -> tuple[str | None, int]:
        store = RedisCacheStore("redis://127.0.0.1:1/0", prefix="fedcd-test:", max_entries=10, ttl_s=60.0, timeout_s=0.2)
        inner = Metered(name)
        try:
            with pytest.raises(CacheStoreUnavailable):
                await store.get("k")
            prediction = await ResponseCached(inner, store, key=_key(name)).respond(_context())
            return prediction.cache, len(inner.contexts)
        finally:
            await store.aclose()

    # Execute / Assert: the entity answered; the lookup and the store both failed, both counted
    assert asyncio.run(run()) == ("miss", 1)
    assert REGISTRY.get_sample_value("fedcd_response_cache_errors_total", {"entity": name}) == 2
