"""Fault injection: a faulty provider next to a healthy one, through the real SDK and the real pipeline.

Each mode scripts one way a provider goes wrong on the wire (``WireServer``); the openai SDK
adapter, built by ``build_entity`` with the standard wrapper chain, talks to it, and the real
``DiagnosisPipeline`` asks it together with a healthy peer on a second server. The expected
diagnosis: the faulty entity is reported failed with the right reason class after the right number
of attempts (and the right waits, recorded by a fake sleep), and the peer's answer is served. With
every entity faulty the pipeline raises ``AllEntitiesFailed`` naming each reason. A provider that
echoes our credentials in its error never gets them into an exception, a log record or a response.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from diagnosis import AllEntitiesFailed, DiagnosisPipeline, DiagnosisRequest  # the pipeline's public name
from providers.config import EntityKind, EntitySpec
from providers.errors import EntityError, EntityParseError, EntityRejected, EntityTimeout, EntityUnavailable
from providers.factory import build_entity
from providers.types import Entity, PromptContext
from qmatrix import QMatrix, StudentResponses
from tests.conftest import make_client

from .conftest import RecordingSleep
from .wire_servers import (
    ANTHROPIC_PATH,
    GROQ_PATH,
    OPENAI_PATH,
    Behaviour,
    CutOff,
    Delay,
    EchoCredentials,
    RawBody,
    Reset,
    WireServer,
    malformed_body,
    rate_limited,
    server_error,
    success,
)

API_KEY = "sk-proj-Fa17Lt1nJ3ct10nK3yQ9w8E7r6T5y4U3i2O1p0AsDf"  # what the echoing stub sends back
MAX_ATTEMPTS = 3
DEADLINE_S = 0.3  # the "slow" mode's deadline; it alone is built with it
# Every other mode gets a deadline no loaded machine reaches: three attempts against a cut-off server took over
# 0.3 s on a busy CI runner and the entity failed with EntityTimeout instead of the fault under test.
GENEROUS_DEADLINE_S = 30.0


@dataclass(frozen=True)
class Fault:
    behaviour: Callable[[], Behaviour]  # built per test: an HTTP date must be fresh
    error: type[EntityError]  # the reason class the pipeline reports
    detail: str  # and a piece of its message that tells this fault from the others
    attempts: int  # requests the faulty server sees
    waits: Callable[[list[float]], bool]  # the retry waits the fake sleep recorded are right


def _backoff(waits: list[float]) -> bool:  # no usable hint: the policy's own jittered backoff
    return len(waits) == MAX_ATTEMPTS - 1 and all(0.0 <= w <= 8.0 for w in waits)


def _in_two_seconds() -> Behaviour:
    return rate_limited(email.utils.formatdate(time.time() + 2, usegmt=True))


FAULTS = {
    "500": Fault(lambda: server_error(500), EntityUnavailable, "HTTP 500", MAX_ATTEMPTS, _backoff),
    "429-retry-after-seconds": Fault(
        lambda: rate_limited(1), EntityUnavailable, "HTTP 429", MAX_ATTEMPTS, lambda w: w == [1.0] * (MAX_ATTEMPTS - 1)
    ),
    "429-retry-after-date": Fault(
        _in_two_seconds, EntityUnavailable, "HTTP 429", MAX_ATTEMPTS,
        lambda w: len(w) == MAX_ATTEMPTS - 1 and all(0 < x <= 2 for x in w),
    ),
    "429-retry-after-garbage": Fault(
        lambda: rate_limited("soon"), EntityUnavailable, "HTTP 429", MAX_ATTEMPTS, _backoff
    ),
    "malformed-json": Fault(malformed_body, EntityParseError, "malformed response", MAX_ATTEMPTS, _backoff),
    "html-instead-of-json": Fault(
        lambda: RawBody(b"<html>502 Bad Gateway</html>", content_type="text/html"), EntityParseError,
        "malformed response", MAX_ATTEMPTS, _backoff,
    ),
    "prose-instead-of-json": Fault(
        lambda: success("I think the student is doing fine overall."), EntityParseError, "no parsable JSON",
        MAX_ATTEMPTS, _backoff,
    ),
    "slow-beyond-deadline": Fault(
        lambda: Delay(5.0, success({})), EntityTimeout, f"{DEADLINE_S:g} s deadline", 1, lambda w: w == []
    ),
    "connection-reset": Fault(Reset, EntityUnavailable, "connection failed", MAX_ATTEMPTS, _backoff),
    "killed-after-headers": Fault(
        lambda: CutOff(body_bytes=0), EntityUnavailable, "received 0 bytes", MAX_ATTEMPTS, _backoff
    ),
    "killed-mid-body": Fault(
        lambda: CutOff(body_bytes=40), EntityUnavailable, "received 40 bytes", MAX_ATTEMPTS, _backoff
    ),
    "401-echoing-credentials": Fault(EchoCredentials, EntityRejected, "HTTP 401", 1, lambda w: w == []),
}


@pytest.fixture
def servers() -> Iterator[tuple[WireServer, WireServer]]:
    with WireServer() as faulty, WireServer() as healthy:
        yield faulty, healthy


@pytest_asyncio.fixture
async def make_entity(fake_sleep: RecordingSleep) -> AsyncIterator[Callable[..., Entity]]:
    built: list[Entity] = []

    def factory(
        name: str, server: WireServer, kind: EntityKind = "openai", suffix: str = "/v1",
        deadline_s: float = GENEROUS_DEADLINE_S,
    ) -> Entity:
        spec = EntitySpec(
            name=name, kind=kind, model="test-model", base_url=server.url + suffix, api_key_env="TEST_KEY",
            timeout_s=2.0, deadline_s=deadline_s, max_attempts=MAX_ATTEMPTS,
        )  # fmt: skip
        entity = build_entity(spec, env={"TEST_KEY": API_KEY}, sleep=fake_sleep)
        built.append(entity)
        return entity

    yield factory
    for entity in built:
        await entity.aclose()


def _request(qmatrix: QMatrix, student: StudentResponses) -> DiagnosisRequest:
    return DiagnosisRequest(student_id=student.student_id, qmatrix=qmatrix, responses=student.responses, epsilon=None)


def _answer(context: PromptContext) -> dict[str, Any]:
    return {c: round(0.2 + 0.1 * i, 2) for i, c in enumerate(context.concepts)}


# openai: the official SDK; openai_compatible on http:// (a local server): the thin path (providers.openai_local),
# which must fail exactly as the SDK path does.
@pytest.mark.parametrize("kind", ["openai", "openai_compatible"])
@pytest.mark.parametrize("mode", list(FAULTS))
async def test_a_faulty_entity_fails_with_its_reason_and_the_healthy_peer_is_served(
    mode: str,
    kind: EntityKind,
    servers: tuple[WireServer, WireServer],
    make_entity: Callable[..., Entity],
    fake_sleep: RecordingSleep,
    qmatrix: QMatrix,
    student: StudentResponses,
    prompt_context: PromptContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare
    fault, (faulty_server, healthy_server) = FAULTS[mode], servers
    faulty_server.fallback = fault.behaviour()
    healthy_server.fallback = success(_answer(prompt_context))
    deadline_s = DEADLINE_S if fault.error is EntityTimeout else GENEROUS_DEADLINE_S
    entities = {"faulty": make_entity("faulty", faulty_server, kind, deadline_s=deadline_s),
                "healthy": make_entity("healthy", healthy_server, kind)}
    pipeline = DiagnosisPipeline(entities)
    caplog.set_level(logging.DEBUG)

    # Execute
    result = await pipeline.diagnose(_request(qmatrix, student))

    # Assert
    outcomes = {o.name: o for o in result.entities}
    assert outcomes["faulty"].status == "failed" and outcomes["faulty"].mastery is None
    error = outcomes["faulty"].error
    assert error is not None and error.startswith(f"{fault.error.__name__}: ") and fault.detail in error, error
    assert len(faulty_server.requests) == fault.attempts
    assert fault.waits(fake_sleep.calls), fake_sleep.calls
    assert outcomes["healthy"].status == "ok" and len(healthy_server.requests) == 1
    assert result.mastery == _answer(prompt_context)
    assert API_KEY not in error and all(API_KEY not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", ["openai", "openai_compatible"])
async def test_all_entities_faulty_is_all_entities_failed_with_each_reason(
    kind: EntityKind,
    servers: tuple[WireServer, WireServer],
    make_entity: Callable[..., Entity],
    qmatrix: QMatrix,
    student: StudentResponses,
) -> None:
    first, second = servers
    first.fallback, second.fallback = server_error(503), Reset()
    entities = {"faulty-a": make_entity("faulty-a", first, kind), "faulty-b": make_entity("faulty-b", second, kind)}
    pipeline = DiagnosisPipeline(entities)

    with pytest.raises(AllEntitiesFailed) as caught:
        await pipeline.diagnose(_request(qmatrix, student))

    reasons = {o.name: o.error for o in caught.value.outcomes}
    assert reasons["faulty-a"].startswith("EntityUnavailable: HTTP 503")  # type: ignore[union-attr]
    assert reasons["faulty-b"].startswith("EntityUnavailable: connection failed")  # type: ignore[union-attr]
    assert len(first.requests) == len(second.requests) == MAX_ATTEMPTS


# --- echoed credentials: not in any exception, log record or API response ---------------------------


@pytest.mark.parametrize(
    "kind,suffix,path", [("openai", "/v1", OPENAI_PATH), ("groq", "", GROQ_PATH), ("anthropic", "", ANTHROPIC_PATH)]
)
async def test_an_echoed_key_is_scrubbed_from_every_adapter_error(
    kind: EntityKind, suffix: str, path: str, wire_server: WireServer, make_entity: Callable[..., Entity],
    prompt_context: PromptContext,
) -> None:
    wire_server.fallback = EchoCredentials()

    with pytest.raises(EntityRejected) as caught:
        await make_entity("faulty", wire_server, kind=kind, suffix=suffix).respond(prompt_context)

    [request] = wire_server.requests
    sent = request.headers.get("authorization", "") + request.headers.get("x-api-key", "")
    assert request.path == path and API_KEY in sent
    chain: BaseException | None = caught.value
    while chain is not None:  # the exception and everything chained to it
        assert API_KEY not in str(chain) and API_KEY not in repr(chain.args)
        chain = chain.__cause__ or (None if chain.__suppress_context__ else chain.__context__)
    assert "[REDACTED]" in str(caught.value)


def test_an_echoed_key_reaches_no_log_record_and_no_api_response(
    tmp_path: Path, servers: tuple[WireServer, WireServer], caplog: pytest.LogCaptureFixture,
    prompt_context: PromptContext,
) -> None:
    faulty_server, healthy_server = servers
    faulty_server.fallback = EchoCredentials()
    healthy_server.fallback = success(_answer(prompt_context))
    sleep = RecordingSleep()

    def entity(name: str, server: WireServer) -> Entity:
        spec = EntitySpec(name=name, kind="openai", model="m", base_url=server.url + "/v1", api_key_env="TEST_KEY")
        return build_entity(spec, env={"TEST_KEY": API_KEY}, sleep=sleep)

    caplog.set_level(logging.DEBUG)
    body = {"student_id": "s-1", "qmatrix_id": "example-prealgebra", "include_entities": True,
            "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q06", "correct": False},
                          {"item_id": "q07", "correct": 0.5}]}  # fmt: skip (the student fixture's items)
    both = {"faulty": entity("faulty", faulty_server), "healthy": entity("healthy", healthy_server)}
    with make_client(tmp_path / "a", both) as client:
        served = client.post("/v1/diagnose", json=body)
    with make_client(tmp_path / "b", {"faulty": entity("faulty", faulty_server)}) as client:
        failed = client.post("/v1/diagnose", json=body)

    assert served.status_code == 200 and failed.status_code == 503
    assert "EntityRejected: HTTP 401" in served.text and "EntityRejected: HTTP 401" in failed.text
    for response in (served, failed):
        assert API_KEY not in response.text and "[REDACTED]" in response.text
    assert caplog.records and all(API_KEY not in record.getMessage() for record in caplog.records)
    assert all(API_KEY not in (record.exc_text or "") for record in caplog.records)

