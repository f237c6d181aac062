"""A calibrated stack serves intervals measured on held-out validation students, narrowing with the student's answers
(issue 33: before, a calibrated diagnosis served no interval and its forecasts read the point as exact)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, logit

from calibration import StackingCalibrator, ValidationSet
from diagnosis import NO_NOISE, DiagnosisPipeline, StackingAggregator
from diagnosis.measured import MeasuredError, measured_intervals
from qmatrix import Response
from tests.factories import FakeEntity, diagnosis_request

CONCEPTS = [f"k{i}" for i in range(4)]


def _students(n: int, seed: int, *, binary: bool = False) -> ValidationSet:
    """SIMULATED students: a member that answers the truth with a logit error of sd √(0.05 + 2 / (answers + 1)), the
    answers drawn 0-30 per concept (the evidence behind each answer)."""
    rng = np.random.default_rng(seed)
    answers, truths, evidence = [], [], []
    for _ in range(n):
        counts = {c: int(rng.integers(0, 31)) for c in CONCEPTS}
        theta = {c: float(rng.normal(0, 1.2)) for c in CONCEPTS}
        truth = {c: float(theta[c] > 0) if binary else float(expit(theta[c])) for c in CONCEPTS}
        said = {c: float(expit(theta[c] + rng.normal(0, np.sqrt(0.05 + 2 / (counts[c] + 1))))) for c in CONCEPTS}
        answers.append({"member": said})
        truths.append(truth)
        evidence.append(counts)
    return ValidationSet(answers=answers, truths=truths, clean=answers, mechanisms=[NO_NOISE] * n, evidence=evidence)


def _cover(error: MeasuredError, data: ValidationSet, stack: StackingAggregator) -> tuple[float, float, float]:
    """Coverage of the truths overall, for students with ≤ 3 answers on a concept, and with ≥ 20."""
    hits: dict[str, list[bool]] = {"all": [], "thin": [], "thick": []}
    for answers, truth, counts in zip(data.answers, data.truths, data.evidence or []):
        mastery = stack.aggregate(answers, CONCEPTS, mechanism=NO_NOISE).mastery
        for c, (lo, hi) in measured_intervals(mastery, error, counts).items():
            hit = lo <= truth[c] <= hi
            hits["all"].append(hit)
            hits["thin" if counts[c] <= 3 else "thick" if counts[c] >= 20 else "all"].append(hit)
    return tuple(float(np.mean(hits[k])) for k in ("all", "thin", "thick"))  # type: ignore[return-value]


def test_the_stack_measures_its_error_and_its_intervals_cover_new_students_thin_and_thick_evidence_alike() -> None:
    # Execute
    fitted = StackingCalibrator().fit(_students(400, seed=1))
    error = MeasuredError.from_json(fitted.params.measured_error)  # type: ignore[attr-defined]
    stack = fitted.params.aggregator()

    # Assert: the error model found both parts, and 90 % intervals cover ~90 % of new students' truths whatever
    # their evidence (one spread for all would under-cover thin evidence and over-cover thick)
    assert error is not None and error.per_answer > 0.5 and error.sd(1) > 2 * error.sd(30)
    overall, thin, thick = _cover(error, _students(1500, seed=2), stack)  # type: ignore[arg-type]
    assert 0.86 <= overall <= 0.94 and 0.85 <= thin <= 0.95 and 0.85 <= thick <= 0.95
    assert any("held-out (student, concept) pairs" in note for note in fitted.notes)


def test_binary_truths_measure_no_error_released_or_not() -> None:
    binary = StackingCalibrator().fit(_students(200, seed=3, binary=True))
    released = StackingCalibrator().fit(_students(400, seed=3, binary=True), release_epsilon=4.0,
                                        rng=np.random.default_rng(0))
    assert binary.params.measured_error == {} and any("binary" in n for n in binary.notes)  # type: ignore[attr-defined]
    assert binary.params.aggregator().measured_error is None
    # a DP release measures them at the clipped logit, as the non-DP path reads a 0 or 1 (calibration.release_error):
    # binary truths sit far from any stack's answer, beyond what the residual clip measures, so no interval either
    assert released.params.measured_error == {}  # type: ignore[attr-defined]
    assert any(n.startswith("no interval") and "beyond what the clip measures" in n for n in released.notes), \
        released.notes
    # nothing of the un-noised residuals is published with a DP release, not even in a note
    assert not any("held-out" in note for note in released.notes)


async def test_a_calibrated_mean_serves_intervals_that_narrow_with_the_students_answers() -> None:
    # Prepare: a stack with a measured error; one student answered one item, another every item
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.7)})
    stack = StackingAggregator(weights={}, intercepts={}, pooled_weights={"a": 1.0})
    stack.measured_error = MeasuredError(base=0.1, per_answer=2.0, rows=100)
    few = diagnosis_request(responses=[Response(item_id="q01", correct=True)])
    many = diagnosis_request(responses=[Response(item_id=i, correct=True) for i in ("q01", "q02", "q11", "q12")])

    # Execute
    thin, thick = await pipeline.diagnose(few, stack), await pipeline.diagnose(many, stack)

    # Assert
    concept = "Add and subtract fractions"  # 1 answer, then 4
    (lo1, hi1), (lo2, hi2) = thin.intervals[concept], thick.intervals[concept]
    assert thin.interval_level == pytest.approx(0.9) and thin.aggregation == "mean"
    assert lo1 < 0.7 < hi1 and hi1 - lo1 > hi2 - lo2 > 0
    assert logit(hi1) - logit(0.7) == pytest.approx(1.6448536 * np.sqrt(0.1 + 2.0 / 2), rel=1e-3)


def test_a_stacks_forecast_is_read_at_the_point_with_the_interval_its_measured_spread_gives() -> None:
    # Prepare: one concept believed at θ = 1 with sd 0.8 (a measured stack's, or a posterior's)
    from diagnosis.forecast import ConceptBelief, item_forecast

    belief = [ConceptBelief(theta=1.0, sd=0.8, assessed=True)]

    # Execute
    point, (lo, hi) = item_forecast(1.5, -0.2, belief, z=1.645, average=False)  # type: ignore[misc]
    averaged, interval = item_forecast(1.5, -0.2, belief, z=1.645)

    # Assert: the same interval either way; only a posterior's P(correct) is pulled toward one half
    assert point == pytest.approx(expit(1.5 * 1.0 - 0.2)) and 0.5 < averaged < point
    assert interval == (lo, hi) and lo < point < hi


async def test_a_concept_some_measured_member_did_not_answer_gets_no_interval() -> None:
    # Prepare: the error was measured with members a and b answering; b fails on this request
    from providers import EntityUnavailable

    def down(context: object) -> dict[str, float]:
        raise EntityUnavailable("down", entity="b")

    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.7), "b": FakeEntity("b", down)})
    stack = StackingAggregator(weights={}, intercepts={}, pooled_weights={"a": 0.5, "b": 0.5})
    stack.measured_error = MeasuredError(base=0.1, per_answer=2.0, rows=100, members=("a", "b"))
    both = DiagnosisPipeline({"a": FakeEntity("a", 0.7), "b": FakeEntity("b", 0.6)})

    # Execute
    alone, together = await pipeline.diagnose(diagnosis_request(), stack), await both.diagnose(diagnosis_request(), stack)

    # Assert: the stack answered from a alone (renormalised), a spread nobody measured: no interval
    assert alone.mastery and alone.intervals == {} and alone.interval_level is None
    assert set(together.intervals) == set(together.mastery) and together.interval_level == pytest.approx(0.9)
