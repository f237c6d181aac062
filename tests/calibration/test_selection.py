"""Stacking chooses, by cross-validation on the validation students, between the full stack and each member alone:
a calibrated federation must not fall below its best member on new students."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import CalibrationRecord, StackingCalibrator, ValidationSet, aggregator_for
from calibration.selection import STACK
from diagnosis import NO_NOISE

CONCEPTS = [f"k{i}" for i in range(6)]


def _students(n: int, seed: int, *, noise_members: int = 0, twins: bool = False) -> ValidationSet:
    """SIMULATED students: 'good' answers truth + N(0, 0.1); ``noise_members`` members answer at random; with
    ``twins`` a second member 'twin' answers truth + independent N(0, 0.1) (averaging the two helps)."""
    rng = np.random.default_rng(seed)
    truths, answers = [], []
    for _ in range(n):
        truth = {c: float(rng.random()) for c in CONCEPTS}
        preds = {"good": {c: float(np.clip(t + rng.normal(0, 0.1), 0, 1)) for c, t in truth.items()}}
        for j in range(noise_members):
            preds[f"noise{j}"] = {c: float(rng.random()) for c in CONCEPTS}
        if twins:
            preds["twin"] = {c: float(np.clip(t + rng.normal(0, 0.1), 0, 1)) for c, t in truth.items()}
        truths.append(truth)
        answers.append(preds)
    return ValidationSet.noiseless(answers, truths)


def _mse(params, data: ValidationSet) -> float:  # type: ignore[no-untyped-def]
    aggregator = params.aggregator()
    errors = [
        (aggregator.aggregate(a, CONCEPTS, mechanism=NO_NOISE).mastery[c] - t[c]) ** 2
        for a, t in zip(data.answers, data.truths) for c in CONCEPTS
    ]
    return float(np.mean(errors))


def _alone(data: ValidationSet, entity: str) -> float:
    return float(np.mean([(a[entity][c] - t[c]) ** 2 for a, t in zip(data.answers, data.truths) for c in CONCEPTS]))


def test_members_that_do_not_help_get_no_weight_and_the_aggregate_keeps_up_with_the_best_member() -> None:
    # 25 validation students, 6 random members: per-concept NNLS weights (fitted on 25 rows each) chase the noise.
    fit_on, fresh = _students(25, seed=1, noise_members=6), _students(2000, seed=2, noise_members=6)
    plain = StackingCalibrator(select=False).fit(fit_on).params
    chosen = StackingCalibrator().fit(fit_on).params
    # The plain stack loses to its best member on new students; the selected aggregate does not.
    assert _mse(plain, fresh) > _alone(fresh, "good") * 1.05
    assert _mse(chosen, fresh) <= _alone(fresh, "good") * 1.02
    assert chosen.selection["chosen"] == "single:good"
    for weights in [*chosen.weights.values(), chosen.pooled_weights]:
        assert weights["good"] > 0.5
        assert all(w == 0.0 for e, w in weights.items() if e != "good")


def test_the_record_shows_every_candidates_cross_validated_score_and_the_choice() -> None:
    fitted = StackingCalibrator().fit(_students(25, seed=1, noise_members=2))
    selection = fitted.params.to_json()["selection"]
    assert set(selection["scores"]) == {STACK, "single:good", "single:noise0", "single:noise1"}
    assert selection["scores"]["single:good"] < selection["scores"]["single:noise0"]
    assert selection["chosen"] in selection["scores"] and selection["folds"] == 5
    assert {"margin", "standard_error", "criterion", "rule", "best_single"} <= set(selection)
    assert any(n.startswith("stack or single member") for n in fitted.notes)
    assert fitted.metrics["selection_cv_mse:single:good"] == selection["scores"]["single:good"]
    assert fitted.metrics["selection_stack_kept"] == float(selection["chosen"] == STACK)
    # Stored and read back (GET /v1/calibrations/{id} serves the stored params): the same choice and aggregate.
    record = CalibrationRecord(id="r", qmatrix_id="q", params=fitted.params)
    again = CalibrationRecord.from_json(record.to_json())
    assert again.params == fitted.params
    answer = {"good": {"k0": 0.3}, "noise0": {"k0": 0.9}, "noise1": {"k0": 0.1}}
    assert aggregator_for(again).aggregate(answer, ["k0"], mechanism=NO_NOISE).mastery == pytest.approx(
        aggregator_for(record).aggregate(answer, ["k0"], mechanism=NO_NOISE).mastery)


def test_a_stack_that_beats_every_member_is_kept() -> None:
    # Two members with independent errors: their average halves the error variance, by far more than the margin.
    fitted = StackingCalibrator().fit(_students(200, seed=3, twins=True))
    assert fitted.params.selection["chosen"] == STACK
    assert fitted.params.selection["margin"] > fitted.params.selection["standard_error"]
    assert fitted.params.fallback == {}
    assert min(fitted.params.pooled_weights.values()) > 0.3


def test_the_other_members_stack_answers_where_the_served_member_did_not() -> None:
    data = _students(25, seed=1, noise_members=6)
    params = StackingCalibrator().fit(data).params
    assert params.selection["chosen"] == "single:good" and params.fallback["member"] == "good"
    others = {f"noise{j}": {"k0": 0.9, "k1": 0.9} for j in range(6)}
    got = params.aggregator().aggregate({"good": {"k0": 0.2}, **others}, ["k0", "k1"], mechanism=NO_NOISE).mastery
    # k0: 'good' alone (its own calibrated scale, near its answer). k1: 'good' did not answer; its weights would
    # leave only its intercept, so the stack fitted on the other members answers.
    assert got["k0"] == pytest.approx(0.2, abs=0.1)
    without_good = StackingCalibrator(select=False).fit(data.without(["good"])).params
    assert got["k1"] == pytest.approx(without_good.aggregator().aggregate(others, ["k1"], mechanism=NO_NOISE).mastery["k1"])
    own_intercept = params.intercepts["k1"] if params.weights.get("k1") else params.pooled_intercept
    assert got["k1"] != pytest.approx(own_intercept)


def test_a_dp_release_makes_no_cross_validated_selection_only_the_dp_guards_choice() -> None:
    # the cross-validated scores are statistics of the students without noise: under a release the DP guard chooses
    # (calibration.release_guard), and a member it serves alone carries that choice, never scores
    for seed in range(3):
        fitted = StackingCalibrator().fit(_students(60, seed=4, noise_members=2), release_epsilon=4.0,
                                          rng=np.random.default_rng(seed))
        served = fitted.params.release["guard"]["served"]
        assert "scores" not in fitted.params.selection
        assert fitted.params.selection.get("chosen", "stack" if served != "plain mean" else None) in (served, None)
        assert (fitted.params.fallback != {}) == served.startswith("single:")
        assert not any(n.startswith("stack or single member") for n in fitted.notes)
        assert not any(k.startswith("selection_") for k in fitted.metrics)


def test_records_stored_before_the_selection_read_as_the_plain_stack() -> None:
    old = {"id": "o", "qmatrix_id": "q", "method": "stacking",
           "params": {"weights": {"k0": {"a": 0.5, "b": 0.5}}, "intercepts": {"k0": 0.0}, "isotonic": {},
                      "pooled_weights": {}, "pooled_intercept": 0.0, "excluded": {}}}
    record = CalibrationRecord.from_json(old)
    assert record.params.selection == {} and record.params.fallback == {}
    got = aggregator_for(record).aggregate({"a": {"k0": 0.2}, "b": {"k0": 0.6}}, ["k0"], mechanism=NO_NOISE)
    assert got.mastery["k0"] == pytest.approx(0.4)
