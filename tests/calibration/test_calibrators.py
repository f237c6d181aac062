"""Calibrators: the paper's (a no-op), truth-referenced bias residuals, and stacking."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import (
    BiasCalibrator,
    CalibrationRecord,
    PaperCalibrator,
    StackingCalibrator,
    StackingParams,
    ValidationSet,
    aggregator_for,
    make_calibrator,
    validation_mae,
)
from diagnosis import NO_NOISE

CONCEPTS = ["a", "b", "c"]


def _validation(n: int = 300, seed: int = 0) -> ValidationSet:
    rng = np.random.default_rng(seed)
    truths = [{c: float(rng.random()) for c in CONCEPTS} for _ in range(n)]
    predictions = [
        {
            "over": {c: float(np.clip(t[c] + 0.3, 0, 1)) for c in CONCEPTS},  # biased upwards
            "good": {c: float(np.clip(t[c] + rng.normal(0, 0.05), 0, 1)) for c in CONCEPTS},
            "useless": {c: float(rng.random()) for c in CONCEPTS},
        }
        for t in truths
    ]
    return ValidationSet.noiseless(predictions, truths)


def test_paper_calibration_changes_nothing_and_keeps_alpha_03() -> None:
    fitted = PaperCalibrator().fit(_validation())
    assert fitted.params.alpha == 0.3
    assert fitted.metrics["validation_mae_in_sample"] == pytest.approx(fitted.metrics["validation_mae_uncalibrated"], abs=1e-12)
    assert any("no-op" in n for n in fitted.notes)


def test_bias_calibration_recovers_the_offset_and_lowers_mae() -> None:
    fitted = BiasCalibrator().fit(_validation())
    # 'over' adds 0.3 except where clipping at 1 cuts it: E[min(t+0.3, 1) − t] = 0.3 − 0.3²/2 = 0.255 for t ~ U(0,1)
    assert fitted.params.residuals["over"]["a"] == pytest.approx(0.255, abs=0.03)
    assert abs(fitted.params.residuals["good"]["a"]) < 0.02
    assert fitted.metrics["validation_mae"] < fitted.metrics["validation_mae_uncalibrated"]


def test_stacking_weights_the_good_entity_and_ignores_the_useless_one() -> None:
    fitted = StackingCalibrator().fit(_validation())
    for c in CONCEPTS:
        w = fitted.params.weights[c]
        assert min(w.values()) >= 0.0
        assert w["good"] > 0.5 and w["useless"] < 0.05
    assert fitted.metrics["validation_mae"] < 0.06


def test_stacking_renormalises_when_an_entity_is_missing_at_diagnosis() -> None:
    record = CalibrationRecord(
        id="s", qmatrix_id="q", params=StackingParams(weights={"a": {"x": 0.6, "y": 0.2}}, intercepts={"a": 0.1})
    )
    agg = aggregator_for(record)
    both = agg.aggregate({"x": {"a": 0.5}, "y": {"a": 1.0}}, ["a"], mechanism=NO_NOISE).mastery["a"]
    only_x = agg.aggregate({"x": {"a": 0.5}}, ["a"], mechanism=NO_NOISE).mastery["a"]
    assert both == pytest.approx(0.1 + 0.6 * 0.5 + 0.2 * 1.0)
    assert only_x == pytest.approx(0.1 + 0.8 * 0.5)  # x's weight scaled up to the fitted total 0.8


def test_stacking_with_too_few_rows_uses_the_pooled_weights_and_says_so() -> None:
    fitted = StackingCalibrator(min_students=5).fit(_validation(n=3))
    assert fitted.params.weights == {}
    assert fitted.params.pooled_weights["good"] > fitted.params.pooled_weights["useless"]
    assert any("pooled" in n for n in fitted.notes)


def test_every_calibration_says_what_it_releases() -> None:
    data = _validation(n=20)
    for method in ("paper", "bias", "stacking", "posterior"):
        assert any("Released without noise" in n for n in make_calibrator(method).fit(data).notes)
    with pytest.raises(ValueError):
        make_calibrator("magic")
    with pytest.raises(ValueError, match="isotonic"):
        make_calibrator("bias", isotonic=True)
    with pytest.raises(ValueError):
        BiasCalibrator().fit(ValidationSet.noiseless([], []))


@pytest.mark.parametrize("method", ["bias", "stacking", "posterior"])
def test_dp_release_adds_noise_that_shrinks_with_epsilon(method: str) -> None:
    data = _validation(n=400)
    clean = make_calibrator(method).fit(data)
    errors = {}
    for eps in (0.5, 50.0):
        fitted = make_calibrator(method).fit(data, release_epsilon=eps, rng=np.random.default_rng(3))
        assert any("differential privacy" in n for n in fitted.notes)
        # measured here: a DP release publishes no un-noised MAE of its students (test_release_stack.py)
        errors[eps] = validation_mae(fitted.params, data) - clean.metrics["validation_mae_in_sample"]
    assert errors[50.0] < 0.03  # plenty of budget: close to the clean fit
    assert errors[0.5] >= errors[50.0] - 1e-9


def test_isotonic_stacking_straightens_a_monotone_but_miscalibrated_entity() -> None:
    rng = np.random.default_rng(4)
    truths = [{c: float(rng.random()) for c in CONCEPTS} for _ in range(400)]
    # right in order, wrong in scale: answer = truth³ (monotone, badly calibrated)
    data = ValidationSet.noiseless([{"cubed": {c: t[c] ** 3 for c in CONCEPTS}} for t in truths], truths)
    plain = StackingCalibrator().fit(data)
    straightened = StackingCalibrator(isotonic=True).fit(data)
    assert straightened.metrics["validation_mae"] < plain.metrics["validation_mae"] / 2
    assert straightened.params.isotonic["cubed"]["a"][0] == sorted(straightened.params.isotonic["cubed"]["a"][0])
    record = CalibrationRecord(id="i", qmatrix_id="q", params=straightened.params)
    value = aggregator_for(record).aggregate({"cubed": {"a": 0.125}}, ["a"], mechanism=NO_NOISE).mastery["a"]
    assert value == pytest.approx(0.5, abs=0.06)  # 0.125 = 0.5³
    with pytest.raises(ValueError, match="isotonic"):
        StackingCalibrator(isotonic=True).fit(data, release_epsilon=1.0, rng=np.random.default_rng(0))


def test_a_released_alpha_is_the_methods_own_not_a_choice_by_the_students_mae() -> None:
    # Prepare: residuals mostly 0 with a few large ones: the grid's MAE choice is α = 0 for bias (applying the mean
    # residual moves the many exact answers) — a statistic of the students' truths
    truths = [{"a": 0.05} for _ in range(40)]
    answers = [{"e": {"a": 0.95 if n < 4 else 0.05}, "f": {"a": 0.05}} for n in range(40)]
    data = ValidationSet.noiseless(answers, truths)
    assert BiasCalibrator().fit(data).params.alpha == 0.0  # what the grid picks unreleased

    # Execute
    bias = BiasCalibrator().fit(data, release_epsilon=4.0, rng=np.random.default_rng(0))
    paper = PaperCalibrator().fit(data, release_epsilon=4.0, rng=np.random.default_rng(0))

    # Assert: released, each α is fixed by the method, and the note says why
    assert bias.params.alpha == 1.0 and paper.params.alpha == 0.3
    assert any("outside the ε accounted for" in n for n in bias.notes + paper.notes)
