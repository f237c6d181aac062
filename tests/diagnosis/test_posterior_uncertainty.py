"""Honest uncertainty at the aggregator (issue 33): entities never measured are of unknown skill, an entity's own
uncertainty is used, and with only uncalibrated entities no interval is narrower than the answers support."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta

from diagnosis import DiagnosisPipeline, PosteriorAggregator
from diagnosis.posterior import UNIFORM_PRIOR, BetaPrior, UncertainAnswer, beta_floor_width, posterior_summaries
from privacy import NoNoise
from providers import MasteryUncertainty
from providers.local_fed import LocalFedEntity
from qmatrix.responses import Response
from tests.factories import FakeEntity, diagnosis_request

# single-concept items of the example Q-matrix, two per concept where it has two
ITEMS = {"Add and subtract fractions": ("q01", "q02"), "Multiply and divide fractions": ("q03", "q04"),
         "Integer arithmetic with negatives": ("q05",), "Order of operations": ("q07",),
         "Solve one-step linear equations": ("q09",), "Solve two-step linear equations": ("q10",)}
# (concept, right answers): every pattern of one and two answers
PATTERNS = [("Add and subtract fractions", (True, True)), ("Multiply and divide fractions", (True, False)),
            ("Integer arithmetic with negatives", (True,)), ("Order of operations", (False,)),
            ("Solve one-step linear equations", (True,)), ("Solve two-step linear equations", (False,))]


def _beta_width(k: int, c: int) -> float:
    low, high = beta(1 + c, 1 + k - c).ppf([0.05, 0.95])
    return float(high - low)


@pytest.mark.parametrize("flip", [False, True])
async def test_uncalibrated_entities_never_narrow_an_interval_below_the_answers_beta(tmp_path: Path, flip: bool) -> None:
    # Prepare: two skill-less LLM stand-ins that agree (0.95 everywhere, the opposite of half the answers) and
    # local-fed with no model for the Q-matrix (its untrained evidence model); no privacy noise
    responses = [Response(item_id=ITEMS[c][i], correct=right != flip)
                 for c, answers in PATTERNS for i, right in enumerate(answers)]
    entities = {"smollm2": FakeEntity("smollm2", 0.95), "gemma3": FakeEntity("gemma3", 0.95),
                "local-fed": LocalFedEntity(tmp_path)}
    # Execute
    result = await DiagnosisPipeline(entities).diagnose(diagnosis_request(responses=responses), PosteriorAggregator())
    # Assert
    for concept, answers in PATTERNS:
        k, c = len(answers), sum(right != flip for right in answers)
        low, high = result.intervals[concept]
        assert high - low >= _beta_width(k, c) - 2e-3, (concept, k, c, (low, high))  # 2e-3: the grid's resolution
        if c == k:
            assert result.mastery[concept] >= 0.5


def test_an_entity_never_measured_is_not_weighed() -> None:
    # Prepare: one entity with a measured τ, one the calibration never saw
    aggregator = PosteriorAggregator(entity_error_sd={"measured": 0.1})
    # Execute
    both = aggregator.aggregate({"measured": {"a": 0.8}, "stranger": {"a": 0.1}}, ["a"], mechanism=NoNoise())
    alone = aggregator.aggregate({"measured": {"a": 0.8}}, ["a"], mechanism=NoNoise())
    # Assert
    assert both.weighed == {"a": ["measured"]} and both.contributors == {"a": ["measured", "stranger"]}
    assert both.mastery == alone.mastery and both.intervals == alone.intervals


def test_an_entitys_own_uncertainty_is_its_models_interval_without_noise() -> None:
    # Prepare: a measured model's answer 0.7 with logit sd 0.5 wherever it stands
    spread = MasteryUncertainty(at=(0.1, 0.9), logit_sd=(0.5, 0.5), answers=12, measured=True)
    answer = UncertainAnswer({"a": 0.7}, {"a": spread})
    # Execute
    result = PosteriorAggregator().aggregate({"local-fed": answer}, ["a"], mechanism=NoNoise())
    # Assert: σ(logit 0.7 ± 1.645 · 0.5), to the grid's resolution
    centre = math.log(0.7 / 0.3)
    expected = [1 / (1 + math.exp(-(centre + z * 1.6448536 * 0.5))) for z in (-1, 1)]
    assert result.intervals["a"] == pytest.approx(expected, abs=2e-3)
    assert result.summaries["a"].median == pytest.approx(0.7, abs=2e-3)


def test_the_floor_applies_only_where_nothing_measured_answered() -> None:
    # Prepare: the same narrow curve, from an assumed model (untrained) and from a trained one; one answer behind it
    narrow = dict(at=(0.1, 0.9), logit_sd=(0.3, 0.3), answers=1)
    assumed = UncertainAnswer({"a": 0.7}, {"a": MasteryUncertainty(**narrow, measured=False)})
    trained = UncertainAnswer({"a": 0.7}, {"a": MasteryUncertainty(**narrow, measured=True)})
    aggregator = PosteriorAggregator()
    # Execute
    (lo_a, hi_a), = aggregator.aggregate({"local-fed": assumed}, ["a"], mechanism=NoNoise()).intervals.values()
    (lo_t, hi_t), = aggregator.aggregate({"local-fed": trained}, ["a"], mechanism=NoNoise()).intervals.values()
    # Assert: assumed parameters cannot claim more than one answer supports; fitted ones keep their interval
    assert hi_a - lo_a >= beta_floor_width(1, 0.9, 0.7) - 1e-9 >= _beta_width(1, 1) - 1e-9
    assert hi_t - lo_t < 0.4


def test_with_no_entity_weighed_each_concept_keeps_its_prior() -> None:
    # Prepare: an uncalibrated aggregator (every entity of unknown skill) and a Beta prior on one concept
    priors = {"a": BetaPrior(2.0, 5.0)}
    aggregator = PosteriorAggregator(priors=priors)
    # Execute
    result = aggregator.aggregate({"x": {"a": 0.9, "b": 0.1}, "y": {"a": 0.8}}, ["a", "b", "c"], mechanism=NoNoise())
    # Assert: nothing weighed; each answered concept's summary is its prior's on the grid, the unanswered one missing
    assert result.weighed == {} and result.missing == ["c"]
    for concept, prior in (("a", priors["a"]), ("b", UNIFORM_PRIOR)):
        expected = posterior_summaries(np.empty((1, 0)), [], prior)[0]
        got = result.summaries[concept]
        fields = ("mean", "median", "lower", "upper", "sd", "level")
        # the same grid sums, up to float rounding (a batch of rows may round its sums differently from one row)
        assert [getattr(got, f) for f in fields] == pytest.approx([getattr(expected, f) for f in fields], abs=1e-12)
        assert result.mastery[concept] == pytest.approx(expected.mean)
        assert result.intervals[concept] == pytest.approx(expected.interval)
