"""providers.circuit: the breaker's state machine, in one process (the in-memory store), on a fake clock."""

from __future__ import annotations

import asyncio
import logging

import pytest

from providers import CircuitBreakers, CircuitBroken, EntityCircuitOpen, EntityError, EntityPrediction, PromptContext
from providers import EntityParseError, EntityRejected, EntitySkipped, EntityTimeout, EntityUnavailable
from providers.circuit import Circuit, CircuitPolicy, CircuitStoreUnavailable, MemoryCircuitStore
from tests.providers.test_wrappers import CONTEXT

THRESHOLD, RESET_S, LEASE_S = 3, 30.0, 10.0


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Scripted:
    """Raises the queued errors in turn (None: answers), then answers; can hold a call open."""

    def __init__(self, name: str = "e") -> None:
        self.name = name
        self.script: list[EntityError | None] = []
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def respond(self, context: PromptContext) -> EntityPrediction:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        outcome = self.script.pop(0) if self.script else None
        if outcome is not None:
            raise outcome
        return EntityPrediction(entity=self.name, mastery={c: 0.5 for c in context.concepts})

    async def aclose(self) -> None:
        pass


def _guarded(store: MemoryCircuitStore | None = None, clock: FakeClock | None = None) -> tuple[CircuitBroken, Scripted]:
    breakers = CircuitBreakers(
        store or MemoryCircuitStore(), failure_threshold=THRESHOLD, reset_timeout_s=RESET_S, clock=clock or FakeClock()
    )
    inner = Scripted()
    return CircuitBroken(inner, breakers.breaker(inner.name, probe_lease_s=LEASE_S)), inner


def _unavailable() -> EntityUnavailable:
    return EntityUnavailable("HTTP 503", status_code=503)


async def _due_for_a_probe(*, hold: bool = False) -> tuple[CircuitBroken, Scripted, FakeClock]:
    """A circuit opened by THRESHOLD failures, its reset timeout just over; ``hold``: calls wait for ``inner.gate``."""
    clock = FakeClock()
    entity, inner = _guarded(clock=clock)
    await _fail(entity, inner, THRESHOLD)
    clock.now += RESET_S
    if hold:
        inner.gate = asyncio.Event()
    return entity, inner, clock


async def _fail(entity: CircuitBroken, inner: Scripted, n: int, error: type[EntityError] = EntityUnavailable) -> None:
    for _ in range(n):
        inner.script.append(error("HTTP 503") if error is not EntityUnavailable else _unavailable())
        with pytest.raises(error):
            await entity.respond(CONTEXT)


# --- the transitions --------------------------------------------------------------------------


async def test_n_consecutive_failures_open_the_circuit_and_the_entity_is_not_asked() -> None:
    # Prepare
    entity, inner = _guarded()
    await _fail(entity, inner, THRESHOLD)

    # Execute
    with pytest.raises(EntityCircuitOpen) as refused:
        await entity.respond(CONTEXT)

    # Assert
    assert inner.calls == THRESHOLD  # the refused call never reached the entity
    assert refused.value.code == "circuit_open" and refused.value.entity == "e"
    assert refused.value.retry_at == pytest.approx(1_000_000.0 + RESET_S)
    assert await entity.breaker.state() == "open"


async def test_a_success_in_between_resets_the_count() -> None:
    entity, inner = _guarded()
    await _fail(entity, inner, THRESHOLD - 1)
    await entity.respond(CONTEXT)
    await _fail(entity, inner, THRESHOLD - 1)
    assert await entity.breaker.state() == "closed"


@pytest.mark.parametrize("error", [EntityRejected, EntityParseError])
async def test_any_answer_from_the_provider_counts_as_up(error: type[EntityError]) -> None:
    # A rejection or an unreadable answer means the provider answered: it is not down.
    entity, inner = _guarded()
    await _fail(entity, inner, THRESHOLD - 1)
    await _fail(entity, inner, 1, error)
    await _fail(entity, inner, THRESHOLD - 1)
    assert await entity.breaker.state() == "closed"


async def test_timeouts_count_as_failures() -> None:
    entity, inner = _guarded()
    await _fail(entity, inner, THRESHOLD, EntityTimeout)
    assert await entity.breaker.state() == "open"


async def test_a_skip_changes_nothing() -> None:
    entity, inner = _guarded()
    await _fail(entity, inner, THRESHOLD - 1)
    await _fail(entity, inner, 2, EntitySkipped)
    await _fail(entity, inner, 1)
    assert await entity.breaker.state() == "open"


async def test_after_the_reset_timeout_one_probe_closes_the_circuit_when_it_succeeds() -> None:
    # Prepare
    clock = FakeClock()
    entity, inner = _guarded(clock=clock)
    await _fail(entity, inner, THRESHOLD)
    clock.now += RESET_S - 1
    with pytest.raises(EntityCircuitOpen):
        await entity.respond(CONTEXT)
    clock.now += 1

    # Execute
    answer = await entity.respond(CONTEXT)

    # Assert
    assert answer.mastery == {"fractions": 0.5} and inner.calls == THRESHOLD + 1
    assert await entity.breaker.state() == "closed"
    await _fail(entity, inner, THRESHOLD - 1)  # the count starts again from zero
    assert await entity.breaker.state() == "closed"


async def test_a_failed_probe_reopens_for_another_reset_timeout() -> None:
    entity, inner, clock = await _due_for_a_probe()

    await _fail(entity, inner, 1)  # the probe

    assert await entity.breaker.state() == "open"
    with pytest.raises(EntityCircuitOpen) as refused:
        await entity.respond(CONTEXT)
    assert refused.value.retry_at == pytest.approx(clock.now + RESET_S)


async def test_only_one_caller_probes_while_the_others_are_refused() -> None:
    # Prepare: open, past the timeout, and a probe that hangs until released
    entity, inner, _ = await _due_for_a_probe(hold=True)

    # Execute
    probe = asyncio.create_task(entity.respond(CONTEXT))
    await asyncio.sleep(0)
    others = await asyncio.gather(*(entity.respond(CONTEXT) for _ in range(5)), return_exceptions=True)
    inner.gate.set()
    answer = await probe

    # Assert
    assert all(isinstance(o, EntityCircuitOpen) for o in others)
    assert inner.calls == THRESHOLD + 1 and answer.entity == "e"
    assert await entity.breaker.state() == "closed"


async def test_a_cancelled_probe_hands_the_probe_back() -> None:
    entity, inner, _ = await _due_for_a_probe(hold=True)
    probe = asyncio.create_task(entity.respond(CONTEXT))
    await asyncio.sleep(0)

    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    inner.gate.set()

    assert (await entity.respond(CONTEXT)).entity == "e"  # the next caller probed at once, and closed it
    assert await entity.breaker.state() == "closed"


async def test_a_probe_whose_holder_never_came_back_lapses_after_its_lease() -> None:
    # Prepare: a probe taken by a caller that died (nothing reports its outcome)
    entity, inner, clock = await _due_for_a_probe()
    await entity.breaker.admit()  # the probe permit, never settled

    # Execute / Assert
    with pytest.raises(EntityCircuitOpen):
        await entity.respond(CONTEXT)
    clock.now += LEASE_S
    assert (await entity.respond(CONTEXT)).entity == "e"
    assert await entity.breaker.state() == "closed"


async def test_late_failures_of_calls_admitted_before_it_opened_do_not_extend_it() -> None:
    # Prepare: five calls admitted while closed
    clock = FakeClock()
    entity, _ = _guarded(clock=clock)
    breaker = entity.breaker
    permits = [await breaker.admit() for _ in range(THRESHOLD + 2)]
    opened_at = clock.now

    # Execute: three fail now (it opens), the other two 5 s later
    for permit in permits[:THRESHOLD]:
        await breaker.failure(permit)
    clock.now += 5
    for permit in permits[THRESHOLD:]:
        await breaker.failure(permit)
        await breaker.success(permit)  # nor does a late success close it

    # Assert
    circuit = (await breaker.store.read(["e"]))["e"]
    assert circuit.state == "open" and circuit.failures == THRESHOLD and circuit.opened_at == opened_at


# --- the store --------------------------------------------------------------------------------


class DownStore(MemoryCircuitStore):
    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    async def update(self, name, change):  # type: ignore[no-untyped-def]
        self.tries += 1
        raise CircuitStoreUnavailable("connection refused")


async def test_an_unreachable_store_lets_calls_through_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    store = DownStore()
    entity, inner = _guarded(store)
    caplog.set_level(logging.WARNING, logger="fedcd.circuit")

    await _fail(entity, inner, THRESHOLD + 2)
    answer = await entity.respond(CONTEXT)

    assert answer.entity == "e" and inner.calls == THRESHOLD + 3
    assert store.tries == 1  # not tried again for a few seconds: a hung store must not slow every call
    warnings = [r for r in caplog.records if "store unavailable" in r.getMessage()]
    assert len(warnings) == 1  # once a minute, not once a call


def test_records_round_trip_through_their_string_form() -> None:
    circuit = Circuit(state="half_open", failures=7, opened_at=1.5, probe="abc", probe_until=2.25)
    assert Circuit.from_fields(circuit.to_fields()) == circuit
    assert Circuit.from_fields({}) == Circuit()
    with pytest.raises(ValueError, match="unknown circuit state"):
        Circuit.from_fields({"state": "ajar"})


@pytest.mark.parametrize("kwargs", [{"failure_threshold": 0}, {"reset_timeout_s": 0}, {"probe_lease_s": -1}])
def test_policy_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CircuitPolicy(**kwargs)  # type: ignore[arg-type]
