"""Fixtures shared by the provider tests: a local wire server, a recording sleep, prompt contexts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from providers.errors import EntityParseError
from providers.types import Entity, EntityPrediction, PromptContext, PromptItem
from qmatrix import QMatrix, Response, StudentResponses, example_qmatrix

from .wire_servers import WireServer

# A student id that must never reach an entity: the tests grep every request for it.
STUDENT_ID = "student-7f3a9c-do-not-send"


class RecordingSleep:
    """Stands in for ``asyncio.sleep`` in the retry wrapper: records each wait, returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def context_for(qmatrix: QMatrix, student: StudentResponses) -> PromptContext:
    """What the gateway sends an entity: Q-filtered concepts and the answered items, no student id."""
    ids = student.item_ids()
    items = tuple(
        PromptItem(
            item_id=r.item_id,
            text=qmatrix.item(r.item_id).text,
            concepts=qmatrix.item(r.item_id).concepts,
            score=r.score,
            answer=r.answer,
        )
        for r in student.responses
    )
    return PromptContext(concepts=qmatrix.concepts_for(ids), items=items)


@pytest.fixture(scope="session")
def qmatrix() -> QMatrix:
    return example_qmatrix()


@pytest.fixture(scope="session")
def student() -> StudentResponses:
    # q01: fractions (add/subtract); q06: negatives + order of operations; q07: order of operations.
    # Together they leave three of the example's six concepts unassessed (the Q-filter's job).
    return StudentResponses(
        student_id=STUDENT_ID,
        responses=(
            Response(item_id="q01", correct=True, answer="11/15"),
            Response(item_id="q06", correct=False, answer="38"),
            Response(item_id="q07", correct=0.5),
        ),
    )


@pytest.fixture(scope="session")
def prompt_context(qmatrix: QMatrix, student: StudentResponses) -> PromptContext:
    return context_for(qmatrix, student)


@pytest.fixture
def fake_sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def wire_server() -> Iterator[WireServer]:
    # One server per test: a fresh queue and request log, and a port no other test shares.
    with WireServer() as server:
        yield server


async def respond_usable(entity: Entity, context: PromptContext, *, calls: int = 2) -> EntityPrediction:
    """Ask a real (tiny, sampled) local LLM, allowing ``calls`` whole calls.

    Each call already retries an unreadable answer up to the spec's ``max_attempts``; the
    270M/135M models still sometimes answer every concept with a huge integer, which the
    parser rightly rejects. A test about the adapter should not fail on that coin toss, so
    it gets one more call; an error of any other kind fails at once.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    for call in range(1, calls + 1):
        try:
            return await entity.respond(context)
        except EntityParseError:
            if call == calls:
                raise
    raise AssertionError("unreachable")

