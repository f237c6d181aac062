"""A diagnosis plan: decided once (context, mechanism, mode, entities, aggregator, deadline), run as it is."""

from __future__ import annotations

import pytest

from diagnosis import (
    AllEntitiesFailed,
    DiagnosisPipeline,
    NoEntitySelected,
    PosteriorAggregator,
    ResidualAggregator,
    Selective,
    StackingAggregator,
    UnknownEntities,
)
from privacy import mechanism_for_request
from tests.factories import FakeEntity, diagnosis_request


def test_a_plan_holds_everything_the_request_is_run_by() -> None:
    # Prepare
    pipeline = DiagnosisPipeline({"a": FakeEntity("a"), "b": FakeEntity("b"), "c": FakeEntity("c")})
    aggregator = PosteriorAggregator()
    request = diagnosis_request(epsilon=4.0, mechanism="laplace", entities=["c", "a"], federation=Selective(threshold=0.5),
                                deadline_s=12.0)

    # Execute
    plan = pipeline.plan(request, aggregator)

    # Assert
    assert plan.request is request and plan.aggregator is aggregator and plan.mode is request.federation
    assert plan.names == ("c", "a") and plan.releases == 2 and plan.deadline_s == 12.0
    assert plan.context.concepts == ("Add and subtract fractions", "Solve two-step linear equations")
    assert plan.mechanism is mechanism_for_request(name="laplace", epsilon=4.0, delta=request.delta, mode="paper",
                                                   n_concepts_total=6, n_concepts_assessed=2)
    assert plan.mechanism is pipeline.mechanism_for(request)  # the one object the charge and the release share
    assert plan.mechanism.charge().epsilon == 4.0


def test_without_an_aggregator_a_plan_takes_the_uncalibrated_mean() -> None:
    plan = DiagnosisPipeline({"a": FakeEntity("a")}).plan(diagnosis_request())
    assert isinstance(plan.aggregator, ResidualAggregator) and plan.aggregator.calibration_id is None


def test_entities_are_asked_for_their_own_uncertainty_only_when_something_reads_it() -> None:
    # Prepare: a mean reads values alone; a posterior, or a selective federation's posterior gauge, reads uncertainty
    pipeline = DiagnosisPipeline({"a": FakeEntity("a")})
    stack = StackingAggregator(weights={}, intercepts={}, pooled_weights={"a": 1.0})

    # Execute
    mean, stacked = pipeline.plan(diagnosis_request()), pipeline.plan(diagnosis_request(), stack)
    posterior = pipeline.plan(diagnosis_request(), PosteriorAggregator())
    gauged = pipeline.plan(diagnosis_request(federation=Selective(threshold=0.5)), stack)

    # Assert
    assert not mean.context.own_uncertainty and not stacked.context.own_uncertainty
    assert posterior.context.own_uncertainty and gauged.context.own_uncertainty


async def test_running_a_plan_selects_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    a, b = FakeEntity("a", 0.2), FakeEntity("b", 0.6)
    pipeline = DiagnosisPipeline({"a": a, "b": b})
    plan = pipeline.plan(diagnosis_request(entities=["b"]))

    def no_second_selection(names: object) -> None:
        raise AssertionError("the plan's entities are selected already")

    monkeypatch.setattr(pipeline, "select", no_second_selection)

    # Execute
    result = await pipeline.run(plan)

    # Assert
    assert [o.name for o in result.entities] == ["b"] and a.contexts == [] and len(b.contexts) == 1


async def test_diagnose_is_plan_then_run() -> None:
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.2), "b": FakeEntity("b", 0.6)}, seed=3)
    planned = await pipeline.run(pipeline.plan(diagnosis_request(epsilon=2.0)))
    again = DiagnosisPipeline({"a": FakeEntity("a", 0.2), "b": FakeEntity("b", 0.6)}, seed=3)
    direct = await again.diagnose(diagnosis_request(epsilon=2.0))
    assert planned.mastery == direct.mastery and planned.privacy == direct.privacy


def test_unknown_entities_are_refused_when_planning() -> None:
    with pytest.raises(UnknownEntities, match="ghost"):
        DiagnosisPipeline({"a": FakeEntity("a")}).plan(diagnosis_request(entities=["ghost"]))


async def test_with_no_entity_to_ask_the_plan_says_why() -> None:
    with pytest.raises(NoEntitySelected, match="no entity to ask: the federation has no entities") as empty:
        DiagnosisPipeline({}).plan(diagnosis_request())
    assert isinstance(empty.value, AllEntitiesFailed) and empty.value.outcomes == []  # callers of that handle it
    with pytest.raises(NoEntitySelected, match="the request names none"):
        await DiagnosisPipeline({"a": FakeEntity("a")}).diagnose(diagnosis_request(entities=[]))
