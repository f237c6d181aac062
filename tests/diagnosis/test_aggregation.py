"""Residual-corrected aggregation, and the proof that the paper's residuals are a no-op."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis import NO_NOISE, CalibrationTag, NoiseLevel, ResidualAggregator, paper_residuals, residual_aggregate


def test_plain_mean_without_residuals() -> None:
    agg = residual_aggregate({"a": {"x": 0.2, "y": 0.9}, "b": {"x": 0.6, "y": 0.5}}, ["x", "y"])
    assert agg.mastery == pytest.approx({"x": 0.4, "y": 0.7})
    assert agg.missing == []


def test_residuals_are_subtracted_with_alpha() -> None:
    # y = 1/2 · ((0.6 − 0.3·0.2) + (0.4 − 0.3·(−0.1))) = 1/2 · (0.54 + 0.43) = 0.485
    agg = residual_aggregate(
        {"a": {"x": 0.6}, "b": {"x": 0.4}}, ["x"], residuals={"a": {"x": 0.2}, "b": {"x": -0.1}}, alpha=0.3
    )
    assert agg.mastery["x"] == pytest.approx(0.485)


def test_each_concept_averages_only_the_entities_that_answered_it() -> None:
    agg = residual_aggregate({"a": {"x": 0.2}, "b": {"x": 0.4, "y": 0.8}}, ["x", "y", "z"])
    assert agg.mastery == pytest.approx({"x": 0.3, "y": 0.8})
    assert agg.missing == ["z"]
    assert agg.contributors == {"x": ["a", "b"], "y": ["b"]}


def test_corrected_value_is_clipped_to_unit_interval() -> None:
    agg = residual_aggregate({"a": {"x": 0.05}}, ["x"], residuals={"a": {"x": 0.5}}, alpha=0.3)
    assert agg.mastery["x"] == 0.0


def test_paper_residuals_against_the_cross_entity_mean_sum_to_zero_and_change_nothing() -> None:
    # Prepare: 50 students, 3 entities with very different biases, 4 concepts.
    rng = np.random.default_rng(5)
    concepts = ["c1", "c2", "c3", "c4"]
    bias = {"confident": 0.3, "conservative": -0.2, "noisy": 0.0}
    students = [
        {e: {c: float(np.clip(rng.random() + b, 0, 1)) for c in concepts} for e, b in bias.items()} for _ in range(50)
    ]
    # Execute
    residuals = paper_residuals(students)
    # Assert: Σ_j r_jk = 0 for every concept, so the correction leaves every diagnosis unchanged.
    for c in concepts:
        assert sum(residuals[e][c] for e in bias) == pytest.approx(0.0, abs=1e-12)
    assert residuals["confident"]["c1"] > 0 > residuals["conservative"]["c1"]  # non-zero individually
    for predictions in students:
        corrected = ResidualAggregator(residuals=residuals, alpha=0.3).aggregate(predictions, concepts, mechanism=NO_NOISE).mastery
        plain = ResidualAggregator().aggregate(predictions, concepts, mechanism=NO_NOISE).mastery
        assert corrected == pytest.approx(plain, abs=1e-12)


def test_aggregator_echoes_its_calibration_id() -> None:
    assert ResidualAggregator().calibration_id is None
    tag = CalibrationTag(id="cal-1", noise=NoiseLevel(mechanism="laplace", epsilon=2.0))
    assert ResidualAggregator(calibration=tag).calibration_id == "cal-1"
    with pytest.raises(ValueError):
        ResidualAggregator(alpha=1.5)


def test_a_mean_has_no_intervals() -> None:
    result = ResidualAggregator().aggregate({"a": {"x": 0.2}}, ["x", "y"], mechanism=NO_NOISE)
    assert result.intervals == {} and result.level is None and result.missing == ["y"]


def test_a_member_of_negligible_weight_is_never_scaled_up_to_the_total() -> None:
    """NNLS leaves ~1e-16 on the members it drops; when only such a member answered, renormalising handed it the
    whole fitted weight (0.05 + 0.9 x 0.2 here), while a weight of exactly 0 gave the intercept: a dropped member is a
    dropped member, its answer carries no fitted information either way."""
    from diagnosis.aggregation import stacked_aggregate

    weights = {"c": {"good": 0.9, "dropped": 1e-16}}
    only_dropped = stacked_aggregate({"dropped": {"c": 0.2}}, ["c"], weights=weights, intercepts={"c": 0.05})
    assert only_dropped.mastery["c"] == pytest.approx(0.05)
    both = stacked_aggregate({"good": {"c": 0.5}, "dropped": {"c": 0.2}}, ["c"], weights=weights,
                             intercepts={"c": 0.05})
    assert both.mastery["c"] == pytest.approx(0.05 + 0.9 * 0.5)
