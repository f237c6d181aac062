"""Circuit breakers for real: through the openai SDK against a wire server that fails, recovers and fails
again; and one circuit shared by two breakers, and by two processes, through Redis."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from diagnosis import DiagnosisPipeline, DiagnosisRequest
from providers.circuit import CircuitBreakers, CircuitBroken, CircuitStore, MemoryCircuitStore
from providers.circuit_redis import RedisCircuitStore
from providers.config import EntitySpec
from providers.errors import EntityCircuitOpen, EntityUnavailable
from providers.factory import build_entity
from providers.types import PromptContext
from qmatrix import QMatrix, StudentResponses
from tests.shared_redis import REDIS_URL

from .conftest import RecordingSleep
from .test_circuit import CONTEXT, FakeClock, Scripted
from .wire_servers import WireServer, server_error, success

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD, RESET_S = 2, 30.0


@pytest_asyncio.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[CircuitStore]:
    if request.param == "memory":
        yield MemoryCircuitStore()
        return
    shared = RedisCircuitStore(REDIS_URL, prefix=request.getfixturevalue("redis_prefix"))
    yield shared
    await shared.aclose()


def _answer(context: PromptContext) -> dict[str, Any]:
    return {c: 0.25 for c in context.concepts}


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_provider_that_fails_recovers_and_fails_again(
    store: CircuitStore, fake_sleep: RecordingSleep, prompt_context: PromptContext, qmatrix: QMatrix,
    student: StudentResponses,
) -> None:
    # Prepare: a flaky provider behind the real openai SDK and the standard chain, next to a healthy one
    clock, flaky_name = FakeClock(), f"flaky-{uuid.uuid4().hex[:8]}"
    circuits = CircuitBreakers(store, failure_threshold=THRESHOLD, reset_timeout_s=RESET_S, clock=clock)
    with WireServer() as flaky, WireServer() as healthy:
        healthy.fallback = success(_answer(prompt_context))
        entities = {
            name: build_entity(
                EntitySpec(name=name, kind="openai", model="m", base_url=f"{server.url}/v1", api_key="sk-test",
                           max_attempts=1, timeout_s=2.0),
                sleep=fake_sleep, circuits=circuits,
            )
            for name, server in ((flaky_name, flaky), ("healthy", healthy))
        }  # fmt: skip
        pipeline = DiagnosisPipeline(entities)
        request = DiagnosisRequest(student_id=student.student_id, qmatrix=qmatrix, responses=student.responses,
                                   epsilon=None)  # fmt: skip

        async def diagnose() -> tuple[str | None, int]:
            result = await pipeline.diagnose(request)
            assert result.mastery == _answer(prompt_context)  # the healthy peer always answers
            outcome = next(o for o in result.entities if o.name == flaky_name)
            return (outcome.reason if outcome.status == "failed" else outcome.status), len(flaky.requests)

        # Execute / Assert: down — two failed calls open the circuit, then it is not asked
        flaky.fallback = server_error(503)
        assert [await diagnose() for _ in range(3)] == [("unavailable", 1), ("unavailable", 2), ("circuit_open", 2)]
        assert (await circuits.states([flaky_name]))[flaky_name] == "open"
        # recovered — still skipped until the reset timeout, then one probe closes it
        flaky.fallback = success(_answer(prompt_context))
        clock.now += RESET_S - 1
        assert await diagnose() == ("circuit_open", 2)
        clock.now += 1
        assert [await diagnose() for _ in range(2)] == [("ok", 3), ("ok", 4)]
        assert (await circuits.states([flaky_name]))[flaky_name] == "closed"
        # down again — opens again after two failures
        flaky.fallback = server_error(500)
        assert [await diagnose() for _ in range(3)] == [("unavailable", 5), ("unavailable", 6), ("circuit_open", 6)]
        assert _count("fedcd_entity_failures_total", entity=flaky_name, reason="circuit_open") == 3
        assert _count("fedcd_entity_failures_total", entity=flaky_name, reason="unavailable") == 4
        await pipeline.aclose()


# --- shared through Redis ---------------------------------------------------------------------


def _pair(redis_prefix: str, clock: FakeClock, *, threshold: int = THRESHOLD) -> list[tuple[CircuitBroken, Scripted]]:
    """The same entity in two 'workers': separate stores (connections) on one Redis, one key prefix."""
    pair = []
    for _ in range(2):
        circuits = CircuitBreakers(RedisCircuitStore(REDIS_URL, prefix=redis_prefix), failure_threshold=threshold,
                                   reset_timeout_s=RESET_S, clock=clock)  # fmt: skip
        inner = Scripted("gpt")
        pair.append((CircuitBroken(inner, circuits.breaker("gpt", probe_lease_s=60.0)), inner))
    return pair


async def test_two_breakers_on_one_redis_share_one_circuit(redis_prefix: str) -> None:
    # Prepare
    clock = FakeClock()
    (a, a_inner), (b, b_inner) = _pair(redis_prefix, clock)

    # Execute / Assert: one failure in each worker opens it for both
    for entity, inner in ((a, a_inner), (b, b_inner)):
        inner.script.append(EntityUnavailable("HTTP 503"))
        with pytest.raises(EntityUnavailable):
            await entity.respond(CONTEXT)
    for entity in (a, b):
        with pytest.raises(EntityCircuitOpen):
            await entity.respond(CONTEXT)
    # past the timeout, A holds the one probe: B is refused meanwhile, then sees it closed
    clock.now += RESET_S
    a_inner.gate = asyncio.Event()
    probe = asyncio.create_task(a.respond(CONTEXT))
    while a_inner.calls < 2:
        await asyncio.sleep(0.001)
    with pytest.raises(EntityCircuitOpen):
        await b.respond(CONTEXT)
    a_inner.gate.set()
    await probe
    assert (await b.respond(CONTEXT)).entity == "gpt"
    assert (a_inner.calls, b_inner.calls) == (2, 2)
    for entity in (a, b):
        await entity.breaker.store.aclose()


async def test_concurrent_failures_in_two_workers_are_each_counted(redis_prefix: str) -> None:
    # Prepare: 39 failures split over two workers, all at once, under a threshold of 40
    (a, a_inner), (b, b_inner) = _pair(redis_prefix, FakeClock(), threshold=40)
    a_inner.script = [EntityUnavailable("503") for _ in range(20)]
    b_inner.script = [EntityUnavailable("503") for _ in range(19)]

    # Execute
    await asyncio.gather(*(e.respond(CONTEXT) for e in [a] * 20 + [b] * 19), return_exceptions=True)

    # Assert: no update lost — still closed at exactly 39, and the 40th opens it
    circuit = (await a.breaker.store.read(["gpt"]))["gpt"]
    assert (circuit.state, circuit.failures) == ("closed", 39)
    b_inner.script.append(EntityUnavailable("503"))
    with pytest.raises(EntityUnavailable):
        await b.respond(CONTEXT)
    assert await a.breaker.state() == "open"
    for entity in (a, b):
        await entity.breaker.store.aclose()


_WORKER = """
import asyncio, sys
from providers.circuit import CircuitBreakers, CircuitBroken
from providers.circuit_redis import RedisCircuitStore
from providers.errors import EntityError, EntityUnavailable
from tests.providers.test_circuit import CONTEXT, Scripted

async def main(url, prefix, failures):
    circuits = CircuitBreakers(RedisCircuitStore(url, prefix=prefix), failure_threshold=3, reset_timeout_s=30)
    inner = Scripted("gpt")
    inner.script = [EntityUnavailable("503") for _ in range(failures)]
    entity = CircuitBroken(inner, circuits.breaker("gpt", probe_lease_s=30))
    outcomes = []
    for _ in range(max(failures, 1)):
        try:
            await entity.respond(CONTEXT)
            outcomes.append("ok")
        except EntityError as exc:
            outcomes.append(exc.code)
    print(",".join(outcomes), await entity.breaker.state(), inner.calls)
    await circuits.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _worker(redis_prefix: str, failures: int) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, REDIS_URL, redis_prefix, str(failures)], cwd=ROOT, env=dict(os.environ),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_two_processes_share_one_circuit(redis_prefix: str) -> None:
    # Execute: process 1 sees three failures and opens it; process 2 is refused without asking
    first = await asyncio.to_thread(_worker, redis_prefix, 3)
    second = await asyncio.to_thread(_worker, redis_prefix, 0)
    # this process, its clock past the 30 s reset timeout, probes successfully; process 3 finds it closed
    circuits = CircuitBreakers(RedisCircuitStore(REDIS_URL, prefix=redis_prefix), failure_threshold=3,
                               reset_timeout_s=30, clock=lambda: time.time() + 30)  # fmt: skip
    here = CircuitBroken(Scripted("gpt"), circuits.breaker("gpt", probe_lease_s=30))
    await here.respond(CONTEXT)
    third = await asyncio.to_thread(_worker, redis_prefix, 0)
    await circuits.aclose()

    # Assert
    assert first == "unavailable,unavailable,unavailable open 3"
    assert second == "circuit_open open 0"
    assert third == "ok closed 1"


async def test_an_unreachable_redis_fails_open(unused_tcp_port: int) -> None:
    # Nothing listens on the port: calls go through unguarded (and the breaker logs it).
    circuits = CircuitBreakers(RedisCircuitStore(f"redis://127.0.0.1:{unused_tcp_port}/0", prefix="x:"),
                               failure_threshold=1, reset_timeout_s=RESET_S)  # fmt: skip
    inner = Scripted("gpt")
    inner.script = [EntityUnavailable("503")]
    entity = CircuitBroken(inner, circuits.breaker("gpt", probe_lease_s=60.0))
    with pytest.raises(EntityUnavailable):
        await entity.respond(CONTEXT)
    assert (await entity.respond(CONTEXT)).entity == "gpt"
    await circuits.aclose()

