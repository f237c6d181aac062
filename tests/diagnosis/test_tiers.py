"""Selective federation: tier 0 first, the next tier only when the posterior is unsure, one deadline for all."""

from __future__ import annotations


import numpy as np
import pytest

from diagnosis import (
    AllEntitiesFailed,
    AskAll,
    DiagnosisPipeline,
    DiagnosisRequest,
    PosteriorAggregator,
    ResidualAggregator,
    Selective,
)
from providers import Entity, EntitySkipped, EntityUnavailable, WithDeadline
from tests.factories import FakeEntity, diagnosis_request

# A posterior whose entities were measured at τ = 0.1 (as a calibration gives them), no noise: one answer gives a
# credible interval about 0.32 wide, two about 0.23. An entity never measured is of unknown skill and never makes a
# tier confident (test_an_unmeasured_entity_never_makes_a_tier_confident).
WIDE, NARROW = 0.2, 0.5


def _measured() -> PosteriorAggregator:
    return PosteriorAggregator(default_error_sd=0.1)


_request = diagnosis_request


def _pipeline(local: FakeEntity, paid: FakeEntity, **more: FakeEntity) -> DiagnosisPipeline:
    entities = {"local": local, "paid": paid, **more}
    tiers = {"local": 0, "paid": 1, **{name: 2 for name in more}}
    return DiagnosisPipeline(entities, tiers=tiers)


async def test_a_confident_tier_0_answers_alone() -> None:
    # Prepare
    local, paid = FakeEntity("local", 0.8), FakeEntity("paid", 0.3)
    # Execute
    result = await _pipeline(local, paid).diagnose(
        _request(federation=Selective(threshold=NARROW)), _measured()
    )
    # Assert: the paid tier was never asked, and the response says why
    assert not paid.contexts
    assert [o.name for o in result.entities] == ["local"]
    stage, = result.federation.stages
    assert (stage.tier, stage.entities, stage.decision) == (0, ("local",), "confident")
    assert stage.widest is not None and stage.widest < NARROW
    assert result.federation.mode == "selective" and not result.federation.escalated


async def test_an_unsure_tier_0_escalates_and_all_answers_are_aggregated() -> None:
    local, paid = FakeEntity("local", 0.8), FakeEntity("paid", 0.4)
    pipeline = _pipeline(local, paid)
    alone = await pipeline.diagnose(_request(federation=Selective(threshold=NARROW)), _measured())
    result = await pipeline.diagnose(_request(federation=Selective(threshold=WIDE)), _measured())
    assert len(paid.contexts) == 1
    assert [s.decision for s in result.federation.stages] == ["uncertain", "last tier"]
    assert "width" in result.federation.stages[0].reason and result.federation.escalated
    assert [o.name for o in result.entities] == ["local", "paid"]
    # Re-aggregated over both tiers: pulled from tier 0's answer towards the paid one, and surer.
    for concept, value in result.mastery.items():
        assert 0.4 < value < alone.mastery[concept]
        (lo, hi), (lo0, hi0) = result.intervals[concept], alone.intervals[concept]
        assert hi - lo < hi0 - lo0


@pytest.mark.parametrize("error", [EntityUnavailable("HTTP 503"), EntitySkipped("no model for this Q-matrix")])
async def test_a_tier_that_released_nothing_escalates(error: Exception) -> None:
    local, paid = FakeEntity("local", error=error), FakeEntity("paid", 0.6)
    result = await _pipeline(local, paid).diagnose(_request(federation=Selective(threshold=NARROW)), _measured())
    assert len(paid.contexts) == 1
    first, last = result.federation.stages
    assert first.decision == "tier failed" and "local" in first.reason
    assert last.decision == "last tier" and result.federation.escalated
    assert all(v == pytest.approx(0.6, abs=0.05) for v in result.mastery.values())


async def test_escalation_stops_at_the_first_confident_tier() -> None:
    local, paid, costly = FakeEntity("local", 0.7), FakeEntity("paid", 0.7), FakeEntity("costly", 0.7)
    # Two agreeing answers narrow the interval below 0.28; one does not.
    result = await _pipeline(local, paid, costly=costly).diagnose(
        _request(federation=Selective(threshold=0.28)), _measured()
    )
    assert [s.decision for s in result.federation.stages] == ["uncertain", "confident"]
    assert len(paid.contexts) == 1 and not costly.contexts


async def test_ask_all_asks_every_tier_at_once() -> None:
    local, paid = FakeEntity("local", 0.8, delay_s=0.05), FakeEntity("paid", 0.3, delay_s=0.05)
    result = await _pipeline(local, paid).diagnose(_request(federation=AskAll()), _measured())
    stage, = result.federation.stages
    assert (stage.tier, stage.decision, set(stage.entities)) == (None, "all", {"local", "paid"})
    assert local.contexts and paid.contexts and result.federation.mode == "all"
    assert _request().federation.name == "all"  # the default mode


async def test_a_mean_aggregation_is_judged_by_the_posterior_gauge() -> None:
    local, paid = FakeEntity("local", 0.8), FakeEntity("paid", 0.4)
    pipeline = _pipeline(local, paid)
    sure = await pipeline.diagnose(_request(federation=Selective(threshold=NARROW, gauge=_measured())),
                                   ResidualAggregator())
    unsure = await pipeline.diagnose(_request(federation=Selective(threshold=WIDE, gauge=_measured())),
                                     ResidualAggregator())
    assert [s.decision for s in sure.federation.stages] == ["confident"]
    assert [s.decision for s in unsure.federation.stages] == ["uncertain", "last tier"]
    assert sure.intervals == {}  # the answer is still the mean: the gauge only decides
    assert all(v == pytest.approx(0.6) for v in unsure.mastery.values())


async def test_an_unmeasured_entity_never_makes_a_tier_confident() -> None:
    # Prepare: no calibration measured either entity (the default gauge: unknown skill)
    local, paid = FakeEntity("local", 0.8), FakeEntity("paid", 0.8)
    # Execute
    result = await _pipeline(local, paid).diagnose(_request(federation=Selective(threshold=NARROW)),
                                                   PosteriorAggregator())
    # Assert: its agreement is no evidence, so the interval stays the prior's and the next tier is asked
    assert result.federation.stages[0].decision == "uncertain" and paid.contexts
    assert all(hi - lo > 0.85 for lo, hi in result.intervals.values())


async def test_a_concept_tier_0_did_not_answer_is_unsure() -> None:
    local = FakeEntity("local", 0.8, missing=["Solve two-step linear equations"])
    paid = FakeEntity("paid", 0.8)
    result = await _pipeline(local, paid).diagnose(_request(federation=Selective(threshold=NARROW)), _measured())
    first = result.federation.stages[0]
    assert first.decision == "uncertain" and "unanswered" in first.reason and paid.contexts
    assert not result.missing_concepts


async def test_tiers_share_the_request_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tier 0 takes at least 0.3 s of a 3 s deadline: the paid tier is bounded by what is left (< 2.7 s), not by a
    # full deadline of its own. Asserted on the bound each entity is given, not on wall-clock time: a busy machine
    # only makes what is left smaller.
    bounds: dict[str, float] = {}

    class Recorded(WithDeadline):
        def __init__(self, inner: Entity, deadline_s: float) -> None:
            bounds[inner.name] = deadline_s
            super().__init__(inner, deadline_s)

    monkeypatch.setattr("diagnosis.pipeline.WithDeadline", Recorded)
    local = FakeEntity("local", 0.8, delay_s=0.3)
    paid = FakeEntity("paid", 0.4, delay_s=30.0)
    result = await _pipeline(local, paid).diagnose(
        _request(federation=Selective(threshold=WIDE), deadline_s=3.0), _measured()
    )
    assert 0 < bounds["paid"] <= 3.0 - 0.3 and bounds["paid"] < bounds["local"] <= 3.0
    outcomes = {o.name: o for o in result.entities}
    assert outcomes["paid"].status == "failed" and outcomes["paid"].reason == "timeout"
    assert [s.decision for s in result.federation.stages] == ["uncertain", "tier failed"]
    assert set(result.mastery) == set(result.concepts)  # tier 0's answer stands


async def test_a_tier_after_the_deadline_is_not_asked() -> None:
    local, paid = FakeEntity("local", 0.8, delay_s=0.3), FakeEntity("paid", 0.4)
    with pytest.raises(AllEntitiesFailed):
        await _pipeline(local, paid).diagnose(
            _request(federation=Selective(threshold=WIDE), deadline_s=0.1), _measured()
        )
    assert not paid.contexts


async def test_the_deadline_bounds_ask_all_too() -> None:
    local, paid = FakeEntity("local", 0.8), FakeEntity("paid", 0.4, delay_s=0.5)
    result = await _pipeline(local, paid).diagnose(_request(deadline_s=0.1), _measured())
    assert {o.name: o.status for o in result.entities} == {"local": "ok", "paid": "failed"}


def test_selective_orders_entities_by_tier() -> None:
    stages = Selective(threshold=0.3).stages({"a": 1, "b": 0, "c": 1, "d": 2})
    assert [(s.tier, s.entities) for s in stages] == [(0, ("b",)), (1, ("a", "c")), (2, ("d",))]


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.5])
def test_a_threshold_outside_0_1_is_refused(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        Selective(threshold=threshold)


def test_the_gauge_must_have_intervals() -> None:
    with pytest.raises(ValueError, match="posterior"):
        Selective(threshold=0.3, gauge=ResidualAggregator())


async def test_keyed_noise_gives_an_entity_the_same_draw_whoever_else_is_asked() -> None:
    # Prepare: noise keyed by (student, entity), as benchmarks use it to compare modes
    def keyed(request: DiagnosisRequest, entity: str) -> np.random.Generator:
        return np.random.default_rng([len(request.student_id), len(entity)])

    local, paid = FakeEntity("local", 0.8), FakeEntity("paid", 0.4)
    pipeline = DiagnosisPipeline({"local": local, "paid": paid}, tiers={"local": 0, "paid": 1}, noise=keyed)
    # Execute
    alone = await pipeline.diagnose(_request(epsilon=8.0, federation=Selective(threshold=1.0)), _measured())
    both = await pipeline.diagnose(_request(epsilon=8.0), _measured())
    # Assert: tier 0's privatized answer is the same draw; without the key every answer draws afresh
    assert alone.entities[0].mastery == {o.name: o.mastery for o in both.entities}["local"]
    assert alone.entities[0].mastery != {c: 0.8 for c in alone.concepts}
    fresh = DiagnosisPipeline({"local": local}, seed=1)
    first, second = [await fresh.diagnose(_request(epsilon=8.0)) for _ in range(2)]
    assert first.entities[0].mastery != second.entities[0].mastery
