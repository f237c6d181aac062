"""An entity with fewer than the minimum of successful validation answers gets no weight in any method."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import (
    CalibrationRecord,
    TooFewAnswers,
    ValidationAnswer,
    aggregator_for,
    make_calibrator,
    validation_set,
)
from diagnosis import NO_NOISE

CONCEPTS = ["a", "b", "c"]
METHODS = ["paper", "bias", "stacking", "posterior"]


def _students(n: int, rare_answers: int, *, rare_error: float = 0.0, seed: int = 0) -> list[ValidationAnswer]:
    """``n`` SIMULATED validation students: 'good' (small error) and 'coarse' (larger error) answer every student;
    'rare' answers the first ``rare_answers`` (truth + ``rare_error``, a constant 1.0 when None) and fails on the rest."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(n):
        truth = {c: float(rng.random()) for c in CONCEPTS}
        answers = {
            "good": {c: float(np.clip(t + rng.normal(0, 0.05), 0, 1)) for c, t in truth.items()},
            "coarse": {c: float(np.clip(t + rng.normal(0, 0.3), 0, 1)) for c, t in truth.items()},
        }
        failed = []
        if s < rare_answers:
            answers["rare"] = {c: float(np.clip(t + rare_error, 0, 1)) for c, t in truth.items()}
        else:
            failed.append("rare")
        out.append(ValidationAnswer(answers=answers, mechanism=NO_NOISE, truth=truth, clean=answers, failed=failed))
    return out


def _moves(params_record: CalibrationRecord, entity: str) -> bool:
    """Whether ``entity``'s answer changes the record's aggregate of one student."""
    agg = aggregator_for(params_record)
    base = {"good": {c: 0.4 for c in CONCEPTS}, "coarse": {c: 0.5 for c in CONCEPTS}}
    without = agg.aggregate(base, CONCEPTS, mechanism=NO_NOISE).mastery
    with_it = agg.aggregate({**base, entity: {c: 1.0 for c in CONCEPTS}}, CONCEPTS, mechanism=NO_NOISE).mastery
    return any(abs(without[c] - with_it[c]) > 1e-12 for c in CONCEPTS)


@pytest.mark.parametrize("method", METHODS)
def test_an_entity_that_failed_on_most_students_gets_no_weight_in_every_method(method: str) -> None:
    # Prepare: 'rare' answered 5 of 30 validation students (a constant-ish bad answer), the minimum is 20.
    data = validation_set(_students(30, 5, rare_error=0.4), keep_clean=True)
    # Execute
    fitted = make_calibrator(method).fit(data, min_answers=20)
    # Assert: left out, with its count, named in the notes; its answer moves no aggregate.
    assert fitted.params.excluded == {"rare": {"answers": 5, "students": 30}}
    assert any("rare answered 5 of 30" in n and "fewer than 20" in n for n in fitted.notes)
    assert fitted.metrics["entities_excluded"] == 1.0
    record = CalibrationRecord(id="x", qmatrix_id="q", params=fitted.params)
    assert not _moves(record, "rare")
    assert _moves(record, "coarse") or method == "stacking"  # stacking may weigh 'coarse' at 0 on its merits
    params = fitted.params.to_json()
    if method in ("paper", "bias"):
        assert "rare" not in params["residuals"]
    if method == "posterior":
        assert "rare" not in params["entity_error_sd"]  # not the widest τ: left out
    if method == "stacking":
        assert params["pooled_weights"]["rare"] == 0.0
        assert all(w["rare"] == 0.0 for w in params["weights"].values())


def test_stacking_fits_the_others_on_every_student_not_only_where_the_rare_entity_answered() -> None:
    # Rows need every entity's answer: fitted with 'rare', only 5 rows per concept would be complete.
    data = validation_set(_students(30, 5), keep_clean=False)
    fitted = make_calibrator("stacking").fit(data, min_answers=20)
    assert set(fitted.params.weights) == set(CONCEPTS)  # 30 complete rows each: no concept falls back to pooled
    assert all(w["good"] > 0.5 for w in fitted.params.weights.values())


@pytest.mark.parametrize("method", METHODS)
def test_an_entity_at_exactly_the_minimum_keeps_its_weight(method: str) -> None:
    # 'rare' is the most accurate entity here (no error) and answered exactly 20 of 30.
    data = validation_set(_students(30, 20), keep_clean=True)
    fitted = make_calibrator(method).fit(data, min_answers=20)
    assert fitted.params.excluded == {}
    assert not any("left out" in n for n in fitted.notes)
    params = fitted.params.to_json()
    if method == "stacking":
        assert params["pooled_weights"]["rare"] > 0.5
    if method == "posterior":
        assert params["entity_error_sd"]["rare"] < params["entity_error_sd"]["coarse"]
    if method == "bias":
        assert "rare" in params["residuals"]
    # One answer fewer than the minimum: left out.
    assert make_calibrator(method).fit(data, min_answers=21).params.excluded == {"rare": {"answers": 20, "students": 30}}


def test_with_fewer_students_than_the_minimum_an_entity_must_answer_every_one() -> None:
    data = validation_set(_students(8, 7), keep_clean=False)
    fitted = make_calibrator("bias").fit(data, min_answers=20)
    assert fitted.params.excluded == {"rare": {"answers": 7, "students": 8}}
    assert any("fewer than 8" in n for n in fitted.notes)
    assert make_calibrator("bias").fit(validation_set(_students(8, 8), keep_clean=False), min_answers=20).params.excluded == {}


def test_an_entity_that_never_answered_is_left_out_and_one_never_asked_is_not() -> None:
    students = _students(10, 0)
    data = validation_set(students, keep_clean=True)
    fitted = make_calibrator("posterior").fit(data, min_answers=20)
    assert fitted.params.excluded == {"rare": {"answers": 0, "students": 10}}  # asked and failed every time
    # No failures recorded (e.g. skipped: no model for the Q-matrix): unmeasured, not left out.
    skipped = validation_set([ValidationAnswer(s.answers, s.mechanism, s.truth, s.clean) for s in students], keep_clean=True)
    assert make_calibrator("posterior").fit(skipped, min_answers=20).params.excluded == {}


def _nobody_answered() -> ValidationAnswer:
    return ValidationAnswer(answers={}, mechanism=NO_NOISE, truth={"a": 1.0}, failed=["good", "coarse", "rare"])


def test_students_nobody_answered_count_as_asked() -> None:
    # 25 asked, 24 answered by everyone: 24 >= 20, nobody is left out, and the count says 25.
    data = validation_set([*_students(24, 24), _nobody_answered()], keep_clean=False)
    assert len(data) == 24 and data.students_asked == 25
    assert make_calibrator("bias").fit(data, min_answers=20).params.excluded == {}
    with pytest.raises(TooFewAnswers, match="at least 25 of the 25"):  # every entity missed one: none is left
        make_calibrator("bias").fit(data, min_answers=25)
    # An entity answering 3 of 30 is left out although nobody answered the other 27 (they count as asked).
    few = validation_set([*_students(3, 3), *(_nobody_answered() for _ in range(27))], keep_clean=False)
    with pytest.raises(TooFewAnswers, match="at least 20 of the 30"):
        make_calibrator("bias").fit(few, min_answers=20)


def test_when_every_entity_has_too_few_answers_there_is_nothing_to_calibrate() -> None:
    students = [
        ValidationAnswer(answers={"x": {"a": 0.5}} if s < 3 else {"y": {"a": 0.5}}, mechanism=NO_NOISE,
                         truth={"a": 0.5}, failed=["y"] if s < 3 else ["x"])
        for s in range(10)
    ]
    with pytest.raises(TooFewAnswers, match="no entity answered at least 10 of the 10"):
        make_calibrator("bias").fit(validation_set(students, keep_clean=False), min_answers=20)
    with pytest.raises(ValueError, match="min_answers"):
        make_calibrator("bias").fit(validation_set(_students(5, 5), keep_clean=False), min_answers=0)


@pytest.mark.parametrize("method", METHODS)
def test_the_exclusion_survives_the_record_and_dp_release(method: str) -> None:
    data = validation_set(_students(40, 5, rare_error=0.4), keep_clean=True)
    fitted = make_calibrator(method).fit(data, min_answers=20, release_epsilon=4.0, rng=np.random.default_rng(0))
    record = CalibrationRecord(id="x", qmatrix_id="q", params=fitted.params)
    again = CalibrationRecord.from_json(record.to_json())
    assert again.params.excluded == {"rare": {"answers": 5, "students": 40}}
    assert not _moves(again, "rare")


def test_records_written_before_exclusions_read_as_excluding_nobody() -> None:
    old = {"id": "o", "qmatrix_id": "q", "method": "stacking",
           "params": {"weights": {}, "intercepts": {}, "isotonic": {}, "pooled_weights": {"x": 1.0}, "pooled_intercept": 0.0}}
    record = CalibrationRecord.from_json(old)
    assert record.params.excluded == {}
    assert type(aggregator_for(record)).__name__ == "StackingAggregator"


def test_unhelpful_entities_are_the_left_out_and_the_zero_weighted_for_the_requests_concepts() -> None:
    from calibration.params import BiasParams, StackingParams

    stacking = StackingParams(weights={"c1": {"a": 0.7, "b": 0.0, "z": 0.0}, "c2": {"a": 0.2, "b": 0.4, "z": 0.0}},
                              pooled_weights={"a": 0.6, "b": 0.1, "z": 0.0},
                              excluded={"x": {"answers": 3, "students": 30}})
    assert set(stacking.unhelpful(["c1"])) == {"b", "x", "z"}  # b has no say in c1
    assert set(stacking.unhelpful(["c1", "c2"])) == {"x", "z"}  # ... but it has in c2
    assert set(stacking.unhelpful(["c3"])) == {"x", "z"}  # a concept without its own weights: the pooled ones
    assert "answered 3 of 30" in stacking.unhelpful(["c1"])["x"]
    assert BiasParams().unhelpful(["c1"]) == {}
