"""providers.wrappers: Retrying (tenacity), WithDeadline, ConcurrencyLimited, RetryPolicy."""

from __future__ import annotations

import asyncio

import pytest

from providers.errors import (
    EntityError,
    EntityParseError,
    EntityRejected,
    EntitySkipped,
    EntityTimeout,
    EntityUnavailable,
)
from providers.circuit import CircuitBreakers, CircuitBroken, MemoryCircuitStore
from providers.observed import Observed
from providers.types import EntityPrediction, PromptContext, PromptItem
from providers.wrappers import ConcurrencyLimited, RetryPolicy, Retrying, WithDeadline, build_chain

CONTEXT = PromptContext(
    concepts=("fractions",),
    items=(PromptItem(item_id="q1", text="1/2 + 1/3", concepts=("fractions",), score=1.0),),
)


class FakeEntity:
    """Raises the queued errors in turn, then answers; counts calls."""

    def __init__(self, errors: list[EntityError] | None = None, *, delay_s: float = 0.0, name: str = "fake") -> None:
        self.name = name
        self.errors = list(errors or [])
        self.delay_s = delay_s
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed = False

    async def respond(self, context: PromptContext) -> EntityPrediction:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.errors:
                raise self.errors.pop(0)
            return EntityPrediction(entity=self.name, mastery={c: 0.5 for c in context.concepts})
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        self.closed = True


class RecordingSleep:
    """An injected async sleep that records the requested delays and does not wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _unavailable(n: int, **kw) -> list[EntityError]:
    return [EntityUnavailable(f"503 #{k}", status_code=503, **kw) for k in range(n)]


# --- Retrying ------------------------------------------------------------------------------


@pytest.mark.parametrize("failures", [0, 1, 3])
async def test_retrying_succeeds_after_transient_failures_and_counts_attempts(failures):
    # Prepare
    inner, sleep = FakeEntity(_unavailable(failures)), RecordingSleep()
    entity = Retrying(inner, RetryPolicy(max_attempts=5), sleep=sleep)

    # Execute
    prediction = await entity.respond(CONTEXT)

    # Assert
    assert prediction.attempts == failures + 1
    assert inner.calls == failures + 1
    assert len(sleep.delays) == failures


async def test_retrying_waits_are_jittered_exponential_within_caps():
    # Prepare
    policy = RetryPolicy(max_attempts=6, initial_wait_s=0.5, max_wait_s=2.0)
    inner, sleep = FakeEntity(_unavailable(5)), RecordingSleep()

    # Execute
    await Retrying(inner, policy, sleep=sleep).respond(CONTEXT)

    # Assert: attempt n waits at most min(max_wait, initial * 2^(n-1))
    caps = [min(2.0, 0.5 * 2**n) for n in range(5)]
    assert len(sleep.delays) == 5
    assert all(0.0 <= d <= cap for d, cap in zip(sleep.delays, caps))


async def test_retry_after_is_honoured():
    # Prepare
    inner, sleep = FakeEntity(_unavailable(2, retry_after=7.5)), RecordingSleep()
    entity = Retrying(inner, RetryPolicy(max_attempts=3, max_retry_after_s=30.0), sleep=sleep)

    # Execute
    prediction = await entity.respond(CONTEXT)

    # Assert
    assert sleep.delays == [7.5, 7.5]
    assert prediction.attempts == 3


async def test_retry_after_equal_to_cap_is_retried():
    # Prepare
    inner, sleep = FakeEntity(_unavailable(1, retry_after=30.0)), RecordingSleep()

    # Execute
    prediction = await Retrying(inner, RetryPolicy(max_retry_after_s=30.0), sleep=sleep).respond(CONTEXT)

    # Assert
    assert sleep.delays == [30.0] and prediction.attempts == 2


async def test_retry_after_above_cap_is_not_retried():
    # Prepare
    inner, sleep = FakeEntity(_unavailable(1, retry_after=120.0)), RecordingSleep()
    entity = Retrying(inner, RetryPolicy(max_attempts=3, max_retry_after_s=30.0), sleep=sleep)

    # Execute
    with pytest.raises(EntityUnavailable) as err:
        await entity.respond(CONTEXT)

    # Assert
    assert err.value.retry_after == 120.0
    assert inner.calls == 1 and sleep.delays == []


async def test_entity_rejected_is_never_retried():
    # Prepare
    inner, sleep = FakeEntity([EntityRejected("401 bad key", status_code=401)]), RecordingSleep()

    # Execute
    with pytest.raises(EntityRejected, match="bad key"):
        await Retrying(inner, RetryPolicy(max_attempts=5), sleep=sleep).respond(CONTEXT)

    # Assert
    assert inner.calls == 1 and sleep.delays == []


async def test_a_skip_is_never_retried_and_passes_through_the_whole_chain():
    inner, sleep = FakeEntity([EntitySkipped("no model for this Q-matrix")]), RecordingSleep()
    chain = build_chain(inner, policy=RetryPolicy(max_attempts=5), deadline_s=5, concurrency=1, sleep=sleep)
    with pytest.raises(EntitySkipped, match="no model"):
        await chain.respond(CONTEXT)
    assert inner.calls == 1 and sleep.delays == []


async def test_timeout_is_retried_as_unavailable():
    # Prepare
    inner, sleep = FakeEntity([EntityTimeout("read timeout")]), RecordingSleep()

    # Execute
    prediction = await Retrying(inner, RetryPolicy(max_attempts=2), sleep=sleep).respond(CONTEXT)

    # Assert
    assert prediction.attempts == 2


async def test_parse_error_is_retried_when_policy_allows():
    # Prepare
    inner, sleep = FakeEntity([EntityParseError("no JSON")]), RecordingSleep()

    # Execute
    prediction = await Retrying(inner, RetryPolicy(retry_parse_errors=True), sleep=sleep).respond(CONTEXT)

    # Assert
    assert prediction.attempts == 2 and inner.calls == 2


async def test_parse_error_is_not_retried_when_policy_forbids():
    # Prepare
    inner, sleep = FakeEntity([EntityParseError("no JSON")]), RecordingSleep()

    # Execute
    with pytest.raises(EntityParseError):
        await Retrying(inner, RetryPolicy(retry_parse_errors=False), sleep=sleep).respond(CONTEXT)

    # Assert
    assert inner.calls == 1 and sleep.delays == []


async def test_exhaustion_reraises_the_last_error():
    # Prepare
    errors = _unavailable(3)
    inner, sleep = FakeEntity(errors + _unavailable(1)), RecordingSleep()
    last = errors[-1]

    # Execute
    with pytest.raises(EntityUnavailable) as err:
        await Retrying(inner, RetryPolicy(max_attempts=3), sleep=sleep).respond(CONTEXT)

    # Assert
    assert err.value is last
    assert inner.calls == 3 and len(sleep.delays) == 2


async def test_max_attempts_one_means_no_retry():
    # Prepare
    inner, sleep = FakeEntity(_unavailable(1)), RecordingSleep()

    # Execute
    with pytest.raises(EntityUnavailable):
        await Retrying(inner, RetryPolicy(max_attempts=1), sleep=sleep).respond(CONTEXT)

    # Assert
    assert inner.calls == 1 and sleep.delays == []


async def test_retrying_keeps_name_and_closes_inner():
    # Prepare
    inner = FakeEntity(name="gpt")
    entity = Retrying(inner, RetryPolicy())

    # Execute
    await entity.aclose()

    # Assert
    assert entity.name == "gpt" and inner.closed


# --- RetryPolicy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"initial_wait_s": -0.1},
        {"max_wait_s": -1},
        {"max_retry_after_s": -1},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_retry_policy_rejects_invalid_values(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_retry_policy_max_attempts_zero_message():
    with pytest.raises(ValueError, match="max_attempts must be >= 1, got 0"):
        RetryPolicy(max_attempts=0)


# --- WithDeadline --------------------------------------------------------------------------


async def test_deadline_raises_entity_timeout_for_slow_entity():
    # Prepare
    entity = WithDeadline(FakeEntity(delay_s=1.0, name="slow"), deadline_s=0.05)

    # Execute
    with pytest.raises(EntityTimeout) as err:
        await entity.respond(CONTEXT)

    # Assert
    assert err.value.entity == "slow"
    assert "0.05 s deadline" in str(err.value)


async def test_deadline_passes_through_fast_answer():
    # Prepare
    entity = WithDeadline(FakeEntity(), deadline_s=1.0)

    # Execute
    prediction = await entity.respond(CONTEXT)

    # Assert
    assert prediction.mastery == {"fractions": 0.5}


@pytest.mark.parametrize("deadline", [0, -1.0])
def test_deadline_must_be_positive(deadline):
    with pytest.raises(ValueError):
        WithDeadline(FakeEntity(), deadline_s=deadline)


async def test_deadline_bounds_all_retries_together():
    # Prepare: each attempt is quick, but the retry waits (real sleeps) add up past the deadline
    inner = FakeEntity(_unavailable(10, retry_after=0.2))
    entity = WithDeadline(Retrying(inner, RetryPolicy(max_attempts=20)), deadline_s=0.1)

    # Execute
    with pytest.raises(EntityTimeout):
        await entity.respond(CONTEXT)

    # Assert
    assert inner.calls == 1


# --- ConcurrencyLimited --------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 3])
async def test_concurrency_never_exceeds_limit(limit):
    # Prepare
    inner = FakeEntity(delay_s=0.01)
    entity = ConcurrencyLimited(inner, limit=limit)

    # Execute
    results = await asyncio.gather(*(entity.respond(CONTEXT) for _ in range(20)))

    # Assert
    assert len(results) == 20 and inner.calls == 20
    assert inner.max_in_flight == limit


@pytest.mark.parametrize("limit", [0, -2])
def test_concurrency_limit_must_be_positive(limit):
    with pytest.raises(ValueError):
        ConcurrencyLimited(FakeEntity(), limit=limit)


async def test_concurrency_slot_is_released_after_failure():
    # Prepare
    inner = FakeEntity([EntityRejected("400")])
    entity = ConcurrencyLimited(inner, limit=1)

    # Execute
    with pytest.raises(EntityRejected):
        await entity.respond(CONTEXT)
    prediction = await asyncio.wait_for(entity.respond(CONTEXT), timeout=1.0)

    # Assert
    assert prediction.mastery == {"fractions": 0.5}


# --- build_chain ---------------------------------------------------------------------------


async def test_build_chain_stacks_wrappers_in_documented_order():
    # Prepare
    inner, sleep = FakeEntity(_unavailable(1), name="m"), RecordingSleep()

    # Execute
    chain = build_chain(inner, policy=RetryPolicy(), deadline_s=1.0, concurrency=2, sleep=sleep)
    prediction = await chain.respond(CONTEXT)

    # Assert: no breaker given, so none in the chain
    assert isinstance(chain, Observed)
    assert isinstance(chain.inner, WithDeadline)
    assert isinstance(chain.inner.inner, ConcurrencyLimited)
    assert isinstance(chain.inner.inner.inner, Retrying) and chain.inner.inner.inner.inner is inner
    assert chain.name == "m" and prediction.attempts == 2


async def test_build_chain_puts_the_breaker_outside_the_deadline():
    # Prepare
    breakers = CircuitBreakers(MemoryCircuitStore(), failure_threshold=1, reset_timeout_s=60)
    inner = FakeEntity(name="m")

    # Execute
    chain = build_chain(inner, policy=RetryPolicy(), deadline_s=1.0, concurrency=2,
                        breaker=breakers.breaker("m", probe_lease_s=6.0))

    # Assert
    assert isinstance(chain, Observed) and isinstance(chain.inner, CircuitBroken)
    assert isinstance(chain.inner.inner, WithDeadline)


async def test_time_queued_for_a_slot_counts_against_the_deadline():
    # Prepare: a hung entity (answers after 30 s) with 4 slots and a 1 s deadline; 12 callers at once.
    hung = FakeEntity(delay_s=30.0, name="hung")
    chain = build_chain(hung, policy=RetryPolicy(max_attempts=1), deadline_s=1.0, concurrency=4)

    async def call() -> BaseException | None:
        try:
            await chain.respond(CONTEXT)
        except EntityTimeout as exc:
            return exc
        return None

    # Execute
    outcomes = await asyncio.gather(*(call() for _ in range(12)))

    # Assert: every caller gets its EntityTimeout within the one deadline, queueing included. Work, not time: had
    # the deadline started only once a slot was free, the next callers would have started calls as the first
    # four timed out (12 calls); with queueing counted, only the first four ever start.
    assert all(isinstance(exc, EntityTimeout) for exc in outcomes)
    assert hung.calls == 4 and hung.in_flight == 0  # each was cancelled, its slot freed


async def test_slots_are_free_again_after_the_deadline_cancelled_everything():
    # Prepare: a chain whose 2 slots were held by calls cut off by the deadline
    slow = FakeEntity(delay_s=30.0, name="slow")
    chain = build_chain(slow, policy=RetryPolicy(max_attempts=1), deadline_s=0.1, concurrency=2)
    await asyncio.gather(*(chain.respond(CONTEXT) for _ in range(5)), return_exceptions=True)
    slow.delay_s = 0.0

    # Execute
    results = await asyncio.gather(*(chain.respond(CONTEXT) for _ in range(3)))

    # Assert
    assert [r.mastery for r in results] == [{"fractions": 0.5}] * 3


def test_a_cached_call_whose_caller_left_fails_without_an_unretrieved_exception() -> None:
    """At shutdown a caller is cancelled while the shared (shielded) call goes on and then fails: that failure must
    not surface as asyncio's "Task exception was never retrieved" (found in the container's stop log)."""
    import gc

    from providers.wrappers import Cached

    reported: list[dict] = []

    class Held:
        """Answers only when released, then fails as an entity does at shutdown."""

        name = "held"

        def __init__(self) -> None:
            self.started, self.release = asyncio.Event(), asyncio.Event()

        async def respond(self, context: PromptContext) -> EntityPrediction:
            self.started.set()
            await self.release.wait()
            raise EntityUnavailable("the server is shutting down", entity=self.name)

        async def aclose(self) -> None:
            return None

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        held = Held()
        cached = Cached(held)  # type: ignore[arg-type]
        caller = asyncio.ensure_future(cached.respond(CONTEXT))
        await held.started.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        shared = next(iter(cached._answers.values()))
        held.release.set()  # the shared call now fails with nobody awaiting it
        await asyncio.wait([shared])
        assert cached._answers == {}  # failures are not cached, even with no caller left to see them
        del shared
        gc.collect()

    asyncio.run(scenario())
    gc.collect()
    assert [c for c in reported if "never retrieved" in str(c.get("message", ""))] == []
