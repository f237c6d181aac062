"""The hosted adapters driven through the real openai, groq and anthropic SDKs against a local server.

Nothing in the SDKs is patched: each adapter is built by ``build_entity`` (so the retry,
deadline and concurrency wrappers are in place) with ``base_url`` pointing at a
``WireServer`` on 127.0.0.1, and the server plays the backend's part, good and bad.
Retry waits go to a recording fake sleep; only the timeout tests wait for real (< 1 s).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from providers.config import EntityKind, EntitySpec
from providers.errors import EntityParseError, EntityRejected, EntityTimeout, EntityUnavailable
from providers.factory import build_entity
from providers.prompts import SYSTEM_PROMPT, mastery_schema
from providers.types import Entity, PromptContext, TokenUsage
from qmatrix import QMatrix

from .conftest import STUDENT_ID, RecordingSleep
from .wire_servers import (
    ANTHROPIC_PATH,
    GROQ_PATH,
    OPENAI_PATH,
    Behaviour,
    Delay,
    RawBody,
    WireServer,
    bad_request,
    malformed_body,
    rate_limited,
    server_error,
    success,
)

API_KEY = "test-key-123"
MODEL = "test-model"


@dataclass(frozen=True)
class Backend:
    kind: EntityKind
    path: str  # where the SDK posts
    base_suffix: str  # appended to the server URL to form the SDK's base_url

    @property
    def key_env(self) -> str:
        return f"{self.kind.upper()}_API_KEY"


BACKENDS = [
    Backend("openai", OPENAI_PATH, "/v1"),
    Backend("groq", GROQ_PATH, ""),  # the groq SDK itself adds /openai/v1/chat/completions
    Backend("anthropic", ANTHROPIC_PATH, ""),
]

EntityFactory = Callable[..., Entity]


@pytest.fixture(params=BACKENDS, ids=[b.kind for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest_asyncio.fixture
async def make_entity(
    backend: Backend, wire_server: WireServer, fake_sleep: RecordingSleep
) -> AsyncIterator[EntityFactory]:
    """Build ``backend``'s entity against the wire server; ``overrides`` go to the EntitySpec."""
    built: list[Entity] = []

    def factory(**overrides: Any) -> Entity:
        fields: dict[str, Any] = {
            "name": f"test-{backend.kind}",
            "kind": backend.kind,
            "model": MODEL,
            "base_url": wire_server.url + backend.base_suffix,
            "api_key_env": backend.key_env,
            "timeout_s": 5.0,
            "deadline_s": 20.0,
            "max_attempts": 3,
        }
        fields.update(overrides)
        entity = build_entity(EntitySpec(**fields), env={backend.key_env: API_KEY}, sleep=fake_sleep)
        built.append(entity)
        return entity

    yield factory
    for entity in built:
        await entity.aclose()


def answer(context: PromptContext, *values: Any) -> dict[str, Any]:
    """A mastery answer keyed by the context's concepts, in order (fewer values = missing concepts)."""
    return dict(zip(context.concepts, values, strict=False))


def sent(server: WireServer, backend: Backend) -> list[dict[str, Any]]:
    """The JSON bodies the SDK posted to the backend's route (and fail if it used another route)."""
    assert [r.path for r in server.requests] == [backend.path] * len(server.requests)
    return [r.json for r in server.requests]


# --- success and what goes over the wire ------------------------------------------------


async def test_success(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext, backend: Backend
) -> None:
    wire_server.script(success(answer(prompt_context, 0.9, 0.25, 0.5)))

    prediction = await make_entity().respond(prompt_context)

    assert prediction.entity == f"test-{backend.kind}"
    assert prediction.model == MODEL
    assert prediction.status == "ok"
    assert prediction.mastery == answer(prompt_context, 0.9, 0.25, 0.5)
    assert prediction.missing == [] and prediction.repairs == []
    assert prediction.usage.prompt_tokens == 42 and prediction.usage.completion_tokens == 7
    assert prediction.latency_ms > 0
    assert prediction.attempts == 1
    assert len(sent(wire_server, backend)) == 1


async def test_request_payload(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    qmatrix: QMatrix,
    backend: Backend,
) -> None:
    wire_server.script(success(answer(prompt_context, 0.9, 0.25, 0.5)))
    await make_entity().respond(prompt_context)

    [request] = wire_server.requests
    body = request.json
    assert body["model"] == MODEL
    assert body["max_tokens"] == 512
    schema = mastery_schema(prompt_context.concepts)
    if backend.kind == "anthropic":
        assert body["system"] == SYSTEM_PROMPT
        assert [m["role"] for m in body["messages"]] == ["user"]
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
        # Anthropic's current API rejects temperature; the spec's default 0.7 must not leak through.
        assert "temperature" not in body
        assert "response_format" not in body
    else:
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        assert body["messages"][0]["content"] == SYSTEM_PROMPT
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "concept_mastery", "schema": schema, "strict": True},
        }
        assert body["temperature"] == 0.7
        assert "output_config" not in body
    assert API_KEY in request.headers.get("authorization", "") + request.headers.get("x-api-key", "")

    # Q-filtered: every assessed concept is asked about; concepts and items not answered are absent.
    prompt = request.text
    for concept in prompt_context.concepts:
        assert f'"{concept}"' in prompt
    unassessed = set(qmatrix.concepts) - set(prompt_context.concepts)
    assert unassessed, "the fixture should leave some concepts unassessed"
    for concept in unassessed:
        assert concept not in prompt
    answered = {item.item_id for item in prompt_context.items}
    for item in qmatrix.items:
        if item.id not in answered and item.text:
            assert item.text not in prompt
    # Privacy: the student's id is nowhere in what left the process.
    assert STUDENT_ID not in request.body.decode()
    assert all(STUDENT_ID not in value for value in request.headers.values())
    assert STUDENT_ID not in request.path


async def test_structured_output_none_sends_no_format(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext
) -> None:
    wire_server.script(success(answer(prompt_context, 0.9, 0.25, 0.5)))
    await make_entity(structured_output="none").respond(prompt_context)

    body = wire_server.requests[0].json
    assert "response_format" not in body and "output_config" not in body


async def test_openai_compatible_json_object_mode(
    wire_server: WireServer, prompt_context: PromptContext, fake_sleep: RecordingSleep
) -> None:
    # llama.cpp's server reads the schema from a json_object response_format; no key is needed.
    spec = EntitySpec(
        name="local", kind="openai_compatible", model="local-model", base_url=wire_server.url + "/v1",
        structured_output="json_object",
    )  # fmt: skip
    entity = build_entity(spec, env={}, sleep=fake_sleep)
    wire_server.script(success(answer(prompt_context, 0.9, 0.25, 0.5)))
    try:
        prediction = await entity.respond(prompt_context)
    finally:
        await entity.aclose()

    assert prediction.mastery == answer(prompt_context, 0.9, 0.25, 0.5)
    [request] = wire_server.requests_to(OPENAI_PATH)
    assert request.json["response_format"] == {"type": "json_object", "schema": mastery_schema(prompt_context.concepts)}


# --- retries: transient failures ---------------------------------------------------------


async def test_429_honours_retry_after(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    fake_sleep: RecordingSleep,
    backend: Backend,
) -> None:
    wire_server.script(rate_limited(retry_after=2), success(answer(prompt_context, 0.9, 0.25, 0.5)))

    prediction = await make_entity().respond(prompt_context)

    assert fake_sleep.calls == [2.0]
    assert prediction.attempts == 2
    assert prediction.mastery == answer(prompt_context, 0.9, 0.25, 0.5)
    assert len(sent(wire_server, backend)) == 2


async def test_500_is_retried(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    fake_sleep: RecordingSleep,
    backend: Backend,
) -> None:
    wire_server.script(server_error(500), success(answer(prompt_context, 0.9, 0.25, 0.5)))

    prediction = await make_entity().respond(prompt_context)

    assert prediction.attempts == 2
    assert len(sent(wire_server, backend)) == 2
    # No Retry-After: exponential backoff with jitter, bounded by the policy's max wait.
    assert len(fake_sleep.calls) == 1 and 0.0 <= fake_sleep.calls[0] <= 8.0


async def test_500_forever_gives_up_after_max_attempts(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    fake_sleep: RecordingSleep,
    backend: Backend,
) -> None:
    wire_server.fallback = server_error(503)

    with pytest.raises(EntityUnavailable) as caught:
        await make_entity(max_attempts=3).respond(prompt_context)

    assert caught.value.status_code == 503
    assert caught.value.entity == f"test-{backend.kind}"
    assert len(sent(wire_server, backend)) == 3
    assert len(fake_sleep.calls) == 2


@pytest.mark.parametrize("failure", [server_error(500), rate_limited(retry_after=1)], ids=["500", "429"])
async def test_sdk_does_not_retry_on_its_own(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    fake_sleep: RecordingSleep,
    failure: Behaviour,
) -> None:
    # The SDKs would retry 429/5xx twice by default; the adapters set max_retries=0 so that
    # retries happen only in our wrapper and never multiply.
    wire_server.script(failure, success(answer(prompt_context, 0.9, 0.25, 0.5)))

    with pytest.raises(EntityUnavailable):
        await make_entity(max_attempts=1).respond(prompt_context)

    assert len(wire_server.requests) == 1
    assert wire_server.requests[0].headers.get("x-stainless-retry-count", "0") == "0"
    assert fake_sleep.calls == []


@pytest.mark.parametrize("code", [400, 401, 404])
async def test_client_errors_are_rejected_without_retry(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    fake_sleep: RecordingSleep,
    code: int,
) -> None:
    wire_server.script(bad_request() if code == 400 else server_error(code), success("{}"))

    with pytest.raises(EntityRejected) as caught:
        await make_entity().respond(prompt_context)

    assert caught.value.status_code == code
    assert len(wire_server.requests) == 1
    assert wire_server.pending == 1  # the success was never asked for
    assert fake_sleep.calls == []


# --- timeouts (the only tests that wait for real, well under a second each) --------------


async def test_attempt_timeout(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext, backend: Backend
) -> None:
    late = success(answer(prompt_context, 0.9, 0.25, 0.5))
    wire_server.script(Delay(5.0, late), Delay(5.0, late))

    with pytest.raises(EntityTimeout):
        await make_entity(timeout_s=0.3, max_attempts=2).respond(prompt_context)

    # Each attempt was cut by the SDK's timeout (had either waited for the server's 5 s, its answer would have
    # been a success, not an EntityTimeout), and retried once.
    assert len(sent(wire_server, backend)) == 2


async def test_deadline_bounds_the_whole_call(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext
) -> None:
    wire_server.script(Delay(5.0, success(answer(prompt_context, 0.9, 0.25, 0.5))))

    # the deadline, not the 5 s attempt timeout, ends the call: a call left to run would have got the answer
    with pytest.raises(EntityTimeout, match="deadline"):
        await make_entity(timeout_s=5.0, deadline_s=0.3).respond(prompt_context)

    assert len(wire_server.requests) == 1


async def test_connection_refused_is_unavailable(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext, fake_sleep: RecordingSleep
) -> None:
    entity = make_entity(max_attempts=2)
    wire_server.close()  # nothing listens on the port any more

    with pytest.raises(EntityUnavailable) as caught:
        await entity.respond(prompt_context)

    assert not isinstance(caught.value, EntityTimeout)
    assert caught.value.status_code is None
    assert len(fake_sleep.calls) == 1  # transient: retried once, then given up


# --- parsing: malformed answers, repairs, partial answers ---------------------------------


@pytest.mark.parametrize(
    "bad",
    [malformed_body(), RawBody(b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")],
    ids=["truncated-json", "html-page"],
)
async def test_malformed_body_is_a_parse_error(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    fake_sleep: RecordingSleep,
    bad: RawBody,
) -> None:
    wire_server.fallback = bad

    with pytest.raises(EntityParseError):
        await make_entity(max_attempts=2).respond(prompt_context)

    # RetryPolicy.retry_parse_errors: an unreadable answer gets another draw, up to max_attempts.
    assert len(wire_server.requests) == 2
    assert len(fake_sleep.calls) == 1


@pytest.mark.parametrize(
    "content",
    [
        '{"Add and subtract fractions": 0.9, "Order of',  # cut off
        "I think the student is doing fine overall.",  # prose, no JSON
        '["not", "an", "object"]',
        json.dumps({"Add and subtract fractions": -3, "Order of operations": 500}),  # nothing usable
    ],
    ids=["truncated", "prose", "json-list", "all-unusable"],
)
async def test_malformed_content_is_a_parse_error_after_retries(
    make_entity: EntityFactory,
    wire_server: WireServer,
    prompt_context: PromptContext,
    fake_sleep: RecordingSleep,
    content: str,
) -> None:
    wire_server.fallback = success(content)

    with pytest.raises(EntityParseError) as caught:
        await make_entity(max_attempts=2).respond(prompt_context)

    assert caught.value.entity.startswith("test-")
    assert len(wire_server.requests) == 2
    assert len(fake_sleep.calls) == 1


async def test_malformed_content_then_good_answer_recovers(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext, backend: Backend
) -> None:
    wire_server.script(success("{not json"), success(answer(prompt_context, 0.9, 0.25, 0.5)))

    prediction = await make_entity().respond(prompt_context)

    assert prediction.attempts == 2
    assert prediction.status == "ok"
    assert len(sent(wire_server, backend)) == 2


async def test_the_tokens_of_unreadable_answers_are_counted_over_the_attempts(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext
) -> None:
    # Prepare: the server bills 42 prompt and 7 completion tokens per answer, readable or not
    wire_server.script(success("{not json"), success(answer(prompt_context, 0.9, 0.25, 0.5)))
    # Execute: an unreadable answer, then a good one; then two unreadable ones
    recovered = await make_entity().respond(prompt_context)
    wire_server.fallback = success("{not json")
    with pytest.raises(EntityParseError) as caught:
        await make_entity(max_attempts=2).respond(prompt_context)
    # Assert: both attempts' tokens, on the answer and on the failure
    assert recovered.usage == TokenUsage(prompt_tokens=2 * 42, completion_tokens=2 * 7)
    assert caught.value.usage == TokenUsage(prompt_tokens=2 * 42, completion_tokens=2 * 7)


async def test_out_of_range_numbers_are_repaired_and_counted(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext
) -> None:
    first, second, third = prompt_context.concepts
    wire_server.script(success({first: 8, second: "85%", third: 0.4}))

    prediction = await make_entity().respond(prompt_context)

    assert prediction.status == "ok"
    assert prediction.mastery == {first: pytest.approx(0.08), second: pytest.approx(0.85), third: 0.4}
    assert sorted((r.rule, r.concept) for r in prediction.repairs) == [("percent", first), ("percent", second)]
    assert prediction.attempts == 1


async def test_missing_concept_gives_partial_prediction(
    make_entity: EntityFactory, wire_server: WireServer, prompt_context: PromptContext
) -> None:
    first, second, third = prompt_context.concepts
    wire_server.script(success({first: 0.4, "Unrelated concept": 0.9}))

    prediction = await make_entity().respond(prompt_context)

    assert prediction.status == "partial"
    assert prediction.mastery == {first: 0.4}  # nothing invented for the missing ones
    assert prediction.missing == [second, third]
    rules = [(r.rule, r.concept) for r in prediction.repairs]
    assert ("missing", second) in rules and ("missing", third) in rules
    assert any(r.rule == "extra_key" for r in prediction.repairs)
    assert prediction.attempts == 1  # partial is an answer, not a failure: no retry
    assert len(wire_server.requests) == 1
