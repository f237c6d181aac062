"""The key-free default federation: SmolLM2 and Gemma-3 embedded in-process with llama.cpp.

Each model is built once per module from ``DEFAULT_EMBEDDED`` (exactly as the gateway
builds it) and asked a real prompt from the example Q-matrix. Calls cost seconds on a
small CPU, so the example answer is fetched once per model and several tests read it;
one more call checks a one-concept prompt. That is two calls per model in the usual case.

Gemma-3-270M under llama.cpp's schema grammar (which ignores ``minimum``/``maximum``) often
answers with numbers like 1000000000000000, which the parser rightly rejects: measured here
at 30-70 % of attempts depending on the prompt. So the example answer may take a few calls
(``respond_usable``), and the one-concept test accepts a clean ``EntityParseError``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from providers.config import DEFAULT_EMBEDDED, EntitySpec
from providers.errors import EntityParseError
from providers.factory import build_entity
from providers.local_models import LocalModelMissing, packaged_model_path
from providers.types import Entity, EntityPrediction, PromptContext
from qmatrix import QMatrix, Response, StudentResponses

from .conftest import context_for, respond_usable

# One event loop for the module: the entities (and their asyncio semaphores) outlive a test.
pytestmark = [pytest.mark.llm, pytest.mark.asyncio(loop_scope="module")]

SPECS = {spec.name: spec for spec in DEFAULT_EMBEDDED}


@dataclass(frozen=True)
class Answer:
    spec: EntitySpec
    context: PromptContext
    prediction: EntityPrediction
    wall_ms: float


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=sorted(SPECS))
async def embedded(request: pytest.FixtureRequest) -> AsyncIterator[tuple[EntitySpec, Entity]]:
    spec = SPECS[request.param]
    assert spec.packaged_model is not None
    try:
        packaged_model_path(spec.packaged_model)
    except LocalModelMissing as exc:
        pytest.skip(str(exc))
    entity = build_entity(spec)  # the full chain: concurrency 1, deadline, retries
    yield spec, entity
    await entity.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def example_answer(embedded: tuple[EntitySpec, Entity], prompt_context: PromptContext) -> Answer:
    spec, entity = embedded
    started = time.perf_counter()
    # Up to 4 calls x max_attempts (2) = 8 draws: P(all unusable) < 0.1 % even for Gemma.
    prediction = await respond_usable(entity, prompt_context, calls=4)
    return Answer(spec, prompt_context, prediction, (time.perf_counter() - started) * 1000.0)


async def test_prediction_shape(example_answer: Answer) -> None:
    prediction, spec = example_answer.prediction, example_answer.spec
    assert isinstance(prediction, EntityPrediction)
    assert prediction.entity == spec.name
    assert prediction.model == spec.model
    assert not prediction.simulated and not prediction.privatized
    assert 1 <= prediction.attempts <= spec.max_attempts


async def test_values_are_in_unit_interval_for_requested_concepts(example_answer: Answer) -> None:
    prediction, concepts = example_answer.prediction, set(example_answer.context.concepts)
    assert prediction.mastery
    assert set(prediction.mastery) <= concepts
    assert all(0.0 <= value <= 1.0 for value in prediction.mastery.values())
    # llama.cpp's schema grammar fixes the keys; only a value can be unusable (then: missing).
    assert set(prediction.mastery) | set(prediction.missing) == concepts
    assert set(prediction.mastery).isdisjoint(prediction.missing)
    assert prediction.status == ("partial" if prediction.missing else "ok")


async def test_latency_and_token_usage_are_recorded(example_answer: Answer) -> None:
    prediction = example_answer.prediction
    # latency_ms covers the last attempt, so it is positive and no longer than the whole call.
    assert 0.0 < prediction.latency_ms <= example_answer.wall_ms
    assert prediction.usage.prompt_tokens > 0
    assert prediction.usage.completion_tokens > 0


async def test_repairs_are_documented_rules(example_answer: Answer) -> None:
    concepts = set(example_answer.context.concepts)
    for repair in example_answer.prediction.repairs:
        assert repair.rule in {"percent", "numeric_string", "unusable_value", "missing"}, repair
        assert repair.concept in concepts


async def test_one_concept_prompt_answers_or_fails_cleanly(
    embedded: tuple[EntitySpec, Entity], qmatrix: QMatrix
) -> None:
    spec, entity = embedded
    student = StudentResponses(
        student_id="embedded-student",
        responses=(Response(item_id="q01", correct=False, answer="3/8"), Response(item_id="q02", correct=True)),
    )
    # Both items assess only fraction addition: a one-key schema, unlike the example's three.
    context = context_for(qmatrix, student)
    assert len(context.concepts) == 1

    try:
        prediction = await entity.respond(context)
    except EntityParseError as exc:
        # An unusable answer (after the spec's retries) must surface as this error, naming
        # the entity and carrying what the model said — never as a made-up value.
        assert exc.entity == spec.name
        assert exc.raw_excerpt
        return

    assert set(prediction.mastery) <= set(context.concepts)
    assert set(prediction.mastery) | set(prediction.missing) == set(context.concepts)
    assert all(0.0 <= value <= 1.0 for value in prediction.mastery.values())
    assert prediction.usage.prompt_tokens > 0
