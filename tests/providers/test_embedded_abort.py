"""An embedded model's call that its caller gave up on stops, and frees the model (issue 20).

The call is made to generate far more than it ever finishes (a grammar of endless letters, thousands of
tokens), so only an abort can end it early: if a test sees the call end with ``CallAborted`` in the model's
thread and the model answer the next call, the abort worked. Nothing here measures time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from providers import llamacpp_embedded
from providers.config import DEFAULT_EMBEDDED
from providers.errors import EntityError
from providers.llamacpp_embedded import CallAborted, LlamaCppEntity
from providers.local_models import LocalModelMissing, packaged_model_path
from providers.types import PromptContext, PromptItem

pytestmark = [pytest.mark.llm]

CONTEXT = PromptContext(concepts=("fractions",), items=(PromptItem(item_id="q1", text="1/2 + 1/3", concepts=("fractions",), score=1.0),))
ENDLESS = 'root ::= [a-z ]+\n'  # never closes: generation runs to max_tokens unless aborted
BOUNDED = llamacpp_embedded.bounded_mastery_grammar


@pytest_asyncio.fixture
async def endless(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[LlamaCppEntity, list[str]]]:
    spec = next(s for s in DEFAULT_EMBEDDED if s.name == "smollm2")
    try:
        packaged_model_path("smollm2")
    except LocalModelMissing as exc:
        pytest.skip(str(exc))
    entity = LlamaCppEntity(spec.model_copy(update={"max_tokens": 3000}))
    outcomes: list[str] = []  # how each call ended in the model's thread
    complete = entity._complete

    def recorded(context: PromptContext, abort: Any) -> dict[str, Any]:
        try:
            result = complete(context, abort)
        except CallAborted as exc:
            # Stopped by llama.cpp's abort callback mid-decode (the RuntimeError it caused), not run to the end
            outcomes.append("aborted" if isinstance(exc.__context__, RuntimeError) else "before start or after end")
            raise
        outcomes.append("finished")
        return result

    monkeypatch.setattr(entity, "_complete", recorded)
    monkeypatch.setattr(llamacpp_embedded, "bounded_mastery_grammar", lambda concepts: ENDLESS)
    await asyncio.to_thread(entity.load)
    yield entity, outcomes
    await entity.aclose()


async def _until_running(entity: LlamaCppEntity) -> None:
    for _ in range(2000):  # bounded in polls; the model starts as soon as its thread picks the call up
        if entity._running is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the call never started")


async def test_a_cancelled_call_stops_and_the_model_answers_the_next_one(endless, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    entity, outcomes = endless

    # Execute: a call cut off while generating (as its deadline or a preemption would)
    call = asyncio.create_task(entity.respond(CONTEXT))
    await _until_running(entity)
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)
    # The model's thread: wait until it is idle again (an empty job queued behind the aborted call)
    await asyncio.get_running_loop().run_in_executor(entity._executor, lambda: None)

    # Assert: aborted, not run to its 3,000 tokens; the model still answers
    assert outcomes == ["aborted"] and entity.aborted == 1 and entity._running is None
    monkeypatch.setattr(llamacpp_embedded, "bounded_mastery_grammar", BOUNDED)  # a grammar that ends
    prediction = await entity.respond(CONTEXT)
    assert outcomes == ["aborted", "finished"] and set(prediction.mastery) <= {"fractions"}


async def test_calls_queued_behind_a_cancelled_one_never_start(endless) -> None:  # type: ignore[no-untyped-def]
    entity, outcomes = endless
    first = asyncio.create_task(entity.respond(CONTEXT))
    await _until_running(entity)
    queued = [asyncio.create_task(entity.respond(CONTEXT)) for _ in range(3)]
    await asyncio.sleep(0)
    for task in (*queued, first):
        task.cancel()
    await asyncio.gather(first, *queued, return_exceptions=True)
    await asyncio.get_running_loop().run_in_executor(entity._executor, lambda: None)
    # The running one was aborted; the queued ones either never ran or stopped before generating.
    assert outcomes.count("finished") == 0 and outcomes[0] == "aborted"


async def test_closing_waits_for_the_running_call_before_freeing_the_model(endless) -> None:  # type: ignore[no-untyped-def]
    entity, outcomes = endless
    call = asyncio.create_task(entity.respond(CONTEXT))
    await _until_running(entity)

    # Execute: the server stops while the call runs (freeing the model under it crashed the process before)
    await entity.aclose()

    # Assert: the call was aborted and had left the model before it was freed; the caller got a clean error
    assert outcomes == ["aborted"] and entity._running is None and not entity.loaded
    result = (await asyncio.gather(call, return_exceptions=True))[0]
    assert isinstance(result, EntityError) and "shutting down" in str(result)
