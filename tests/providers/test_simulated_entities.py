"""SIMULATED hosted entities follow their documented noise model and are labelled."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis import build_context
from providers import EntitySpec, build_adapter
from providers.simulated import SimulatedEntity, simulated_family
from providers.wrappers import Cached
from qmatrix import example_qmatrix, simulate_dina

Q = example_qmatrix()


def _contexts(n: int = 200):  # type: ignore[no-untyped-def]
    data = simulate_dina(Q, n_students=n, seed=3)
    return [build_context(Q, s.responses) for s in data.students]


async def test_family_is_labelled_simulated() -> None:
    family = simulated_family()
    assert set(family) == {"sim:confident", "sim:conservative", "sim:specialist"}
    prediction = await family["sim:confident"].respond(_contexts(1)[0])
    assert prediction.simulated is True and prediction.model == "simulated-confident"


@pytest.mark.parametrize("style,low,high", [("confident", 0.7, 0.9), ("conservative", 0.4, 0.6)])
async def test_ranges_match_the_paper_heterogeneity(style: str, low: float, high: float) -> None:
    entity = SimulatedEntity(style)  # type: ignore[arg-type]
    values = [v for ctx in _contexts() for v in (await entity.respond(ctx)).mastery.values()]
    assert min(values) >= low and max(values) <= high


async def test_specialist_is_accurate_on_its_concepts_only() -> None:
    entity = SimulatedEntity("specialist")
    errors: dict[bool, list[float]] = {True: [], False: []}
    for ctx in _contexts():
        answer = (await entity.respond(ctx)).mastery
        for item_concept in answer:
            p = np.mean([i.score for i in ctx.items if item_concept in i.concepts])
            errors[entity._is_specialty(item_concept)].append(abs(answer[item_concept] - p))
    assert np.mean(errors[True]) < 0.06 < 0.2 < np.mean(errors[False])


async def test_same_question_same_answer_and_seeds_differ() -> None:
    ctx = _contexts(1)[0]
    a, b = SimulatedEntity("specialist", seed=1), SimulatedEntity("specialist", seed=2)
    assert (await a.respond(ctx)).mastery == (await a.respond(ctx)).mastery
    assert (await a.respond(ctx)).mastery != (await b.respond(ctx)).mastery


def test_names_must_say_simulated() -> None:
    with pytest.raises(ValueError):
        SimulatedEntity("confident", name="gpt")
    with pytest.raises(ValueError):
        EntitySpec(name="gpt", kind="simulated", simulated_style="confident")
    adapter = build_adapter(EntitySpec(name="sim:c", kind="simulated", simulated_style="conservative"))
    assert adapter.name == "sim:c"


async def test_cached_answers_each_context_once() -> None:
    cached = Cached(SimulatedEntity("confident"))
    ctx = _contexts(1)[0]
    first, second = await cached.respond(ctx), await cached.respond(ctx)
    assert first.mastery == second.mastery and (cached.hits, cached.misses) == (1, 1)
    # the reuse called no provider: it says so, and uses no tokens (usage is counted once)
    assert (second.cache, second.usage.prompt_tokens, first.usage.prompt_tokens > 0) == ("hit", 0, True)
