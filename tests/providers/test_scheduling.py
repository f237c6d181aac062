"""providers.scheduling: interactive calls first, background calls capped and preempted, the innermost
deadline fires first (so breakers and metrics see timeouts). Every assertion is on order or counts of
work, never on elapsed time."""

from __future__ import annotations

import asyncio

import pytest

from providers.circuit import CircuitBreakers, MemoryCircuitStore
from providers.errors import EntityTimeout
from providers.observed import ENTITY_FAILURES
from providers.scheduling import PrioritySlots, background_priority, call_priority
from providers.types import PromptContext, PromptItem
from providers.wrappers import RetryPolicy, WithDeadline, build_chain
from tests.factories import FakeEntity

CONTEXT = PromptContext(concepts=("fractions",), items=(PromptItem(item_id="q1", text="1/2+1/4?", concepts=("fractions",), score=1.0),))


class Gate:
    """A call that runs until released; records the order calls started in, by label."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        self.release = asyncio.Event()

    async def call(self, label: str) -> str:
        self.started.append(label)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(label)
            raise
        self.finished.append(label)
        return label


async def _until(predicate, *, steps: int = 1000) -> None:  # type: ignore[no-untyped-def]
    """Let the loop run until ``predicate()`` holds (bounded in loop steps, not seconds)."""
    for _ in range(steps):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def _background(slots: PrioritySlots, gate: Gate, label: str) -> str:
    with background_priority():
        assert call_priority() == "background"
        return await slots.run(lambda: gate.call(label))


def test_priority_defaults_to_interactive() -> None:
    assert call_priority() == "interactive"


@pytest.mark.parametrize("share", [0.0, 1.5, -1])
def test_background_share_must_lie_in_the_unit_interval(share: float) -> None:
    with pytest.raises(ValueError):
        PrioritySlots(2, background_share=share)


async def test_interactive_call_goes_before_background_calls_queued_earlier() -> None:
    # Prepare: one slot, held by a job's call, with five more of the job's calls queued
    slots, gate = PrioritySlots(1), Gate()
    jobs = [asyncio.create_task(_background(slots, gate, f"job{i}")) for i in range(6)]
    await _until(lambda: gate.started == ["job0"])

    # Execute: a user's call arrives last
    user = asyncio.create_task(slots.run(lambda: gate.call("user")))
    await _until(lambda: len(slots._waiters.interactive) == 1)
    gate.release.set()
    await asyncio.gather(user, *jobs)

    # Assert: it ran right after the call in flight, before the five queued before it
    assert gate.started[:2] == ["job0", "user"]
    assert sorted(gate.finished) == sorted(["user"] + [f"job{i}" for i in range(6)])


async def test_background_calls_hold_at_most_their_share_of_the_slots() -> None:
    # Prepare: 4 slots, jobs may hold half; ten job calls
    slots, gate = PrioritySlots(4, background_share=0.5), Gate()
    jobs = [asyncio.create_task(_background(slots, gate, f"job{i}")) for i in range(10)]
    await _until(lambda: len(gate.started) == 2)
    for _ in range(50):
        await asyncio.sleep(0)

    # Execute: two users arrive
    users = [asyncio.create_task(slots.run(lambda i=i: gate.call(f"user{i}"))) for i in range(2)]
    await _until(lambda: len(gate.started) == 4)

    # Assert: only two job calls ever ran at once; the users got the other two slots without waiting
    assert gate.started == ["job0", "job1", "user0", "user1"]
    gate.release.set()
    await asyncio.gather(*jobs, *users)
    assert len(gate.finished) == 12


async def test_a_job_gets_a_slot_of_an_entity_with_only_one() -> None:
    slots, gate = PrioritySlots(1, background_share=0.5), Gate()
    gate.release.set()
    assert await _background(slots, gate, "job") == "job"


async def test_preemption_gives_a_job_slot_to_a_user_and_the_job_call_starts_over() -> None:
    # Prepare: an embedded model's one slot, held by a job's call
    slots, gate = PrioritySlots(1, preempt=True), Gate()
    job = asyncio.create_task(_background(slots, gate, "job"))
    await _until(lambda: gate.started == ["job"])

    # Execute: a user's call arrives; the job's call is cancelled and the user's runs
    user = asyncio.create_task(slots.run(lambda: gate.call("user")))
    await _until(lambda: gate.started == ["job", "user"])
    assert gate.cancelled == ["job"] and slots.preemptions == 1
    gate.release.set()
    results = await asyncio.gather(user, job)

    # Assert: both answered; the job's call ran twice (cut once), never at the same time as the user's
    assert results == ["user", "job"]
    assert gate.started == ["job", "user", "job"] and slots.in_use == 0


async def test_without_preemption_the_user_waits_only_for_the_call_in_flight() -> None:
    slots, gate = PrioritySlots(1, preempt=False), Gate()
    job = asyncio.create_task(_background(slots, gate, "job"))
    await _until(lambda: gate.started == ["job"])
    user = asyncio.create_task(slots.run(lambda: gate.call("user")))
    for _ in range(50):
        await asyncio.sleep(0)
    assert gate.started == ["job"] and gate.cancelled == [] and slots.preemptions == 0
    gate.release.set()
    assert await asyncio.gather(user, job) == ["user", "job"]


async def test_a_caller_cancelled_while_waiting_leaves_no_slot_taken() -> None:
    slots, gate = PrioritySlots(1), Gate()
    first = asyncio.create_task(slots.run(lambda: gate.call("first")))
    await _until(lambda: gate.started == ["first"])
    waiting = asyncio.create_task(slots.run(lambda: gate.call("waiting")))
    await _until(lambda: len(slots._waiters.interactive) == 1)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    gate.release.set()
    await first
    assert slots.in_use == 0 and gate.started == ["first"]
    assert await slots.run(lambda: gate.call("later")) == "later"


async def test_a_cancelled_user_does_not_lose_the_slot_a_preemption_freed() -> None:
    # The user gives up right after its preemption freed the slot: the job's call must still finish.
    slots, gate = PrioritySlots(1, preempt=True), Gate()
    job = asyncio.create_task(_background(slots, gate, "job"))
    await _until(lambda: gate.started == ["job"])
    user = asyncio.create_task(slots.run(lambda: gate.call("user")))
    await _until(lambda: gate.cancelled == ["job"])
    user.cancel()
    await asyncio.gather(user, return_exceptions=True)
    gate.release.set()
    assert await job == "job" and slots.in_use == 0


# --- the request's deadline and the entity's breaker -----------------------------------------


async def test_a_shorter_request_deadline_counts_as_the_entitys_timeout_for_its_breaker() -> None:
    # Prepare: a hung entity behind the standard chain with a 10 s deadline and a breaker opening after 2
    # failed calls; each request has a 0.05 s deadline (as the pipeline wraps it).
    breakers = CircuitBreakers(MemoryCircuitStore(), failure_threshold=2, reset_timeout_s=60)
    hung = FakeEntity("hung-breaker", delay_s=30.0)
    chain = build_chain(hung, policy=RetryPolicy(max_attempts=1), deadline_s=10.0, concurrency=4,
                        breaker=breakers.breaker("hung-breaker", probe_lease_s=15.0))
    before = ENTITY_FAILURES.labels("hung-breaker", "timeout")._value.get()

    # Execute
    for _ in range(2):
        with pytest.raises(EntityTimeout) as caught:
            await WithDeadline(chain, 0.05).respond(CONTEXT)
        assert "the request's deadline" in str(caught.value)

    # Assert: both timeouts reached the breaker (now open) and the failure metric
    assert (await breakers.states(["hung-breaker"]))["hung-breaker"] == "open"
    assert ENTITY_FAILURES.labels("hung-breaker", "timeout")._value.get() - before == 2


async def test_the_entitys_own_deadline_still_applies_inside_a_longer_request_deadline() -> None:
    hung = FakeEntity("hung-own", delay_s=30.0)
    chain = build_chain(hung, policy=RetryPolicy(max_attempts=1), deadline_s=0.05, concurrency=1)
    with pytest.raises(EntityTimeout) as caught:
        await WithDeadline(chain, 60.0).respond(CONTEXT)
    assert "0.05 s deadline" in str(caught.value)
