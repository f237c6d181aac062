"""A DP-released stack serves intervals too (issue 33): its error is released with a share of the calibration's ε
(calibration.release_error), and before, the product's default real-data calibration served none."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import StackingCalibrator
from calibration.release_error import (
    ERROR_SHARE,
    REACH,
    RESIDUAL_BOUND,
    SENSITIVITY,
    error_statistics,
    release_measured_error,
    solve_error,
)
from diagnosis import NO_NOISE, StackingAggregator
from diagnosis.measured import MeasuredError
from tests.calibration.test_measured import _cover, _students


def _released(n: int, epsilon: float, seed: int, data_seed: int = 1) -> tuple[MeasuredError | None, object]:
    fitted = StackingCalibrator().fit(_students(n, seed=data_seed), release_epsilon=epsilon,
                                      rng=np.random.default_rng(seed))
    return MeasuredError.from_json(fitted.params.measured_error), fitted  # type: ignore[attr-defined]


def test_one_replaced_student_moves_the_statistics_by_at_most_the_sensitivity() -> None:
    # Prepare: 60 students with 0-5 measured pairs each, residuals beyond the clip included
    rng = np.random.default_rng(0)
    students = [(rng.normal(0, 2.5, m), 1 / (rng.integers(0, 31, m) + 1.0)) for m in rng.integers(0, 6, 60)]
    adversarial = (np.full(4, RESIDUAL_BOUND), np.ones(4))  # every residual at the clip, u = 1
    empty = (np.zeros(0), np.zeros(0))
    beyond = (np.array([-100.0, 50.0]), np.ones(2))  # the statistics clip what they are given

    # Execute / Assert: replace each student in turn by each extreme (neighbouring datasets)
    stats = error_statistics(students)
    for i in range(len(students)):
        for other in (adversarial, empty, beyond):
            neighbour = error_statistics([*students[:i], other, *students[i + 1:]])
            assert np.abs(neighbour - stats).sum() <= SENSITIVITY + 1e-9
    # the bound is tight: an empty student replaced by the adversarial one moves them by exactly Δ₁ = 3 + 2R²
    gap = error_statistics([*students, adversarial]) - error_statistics([*students, empty])
    assert np.abs(gap).sum() == pytest.approx(SENSITIVITY) and SENSITIVITY == 3 + 2 * RESIDUAL_BOUND**2


def test_the_solve_recovers_a_known_spread_and_refuses_a_thin_count() -> None:
    # Prepare: exact statistics of residuals with sd² = 0.1 + 1.0·u (well inside the clip)
    rng = np.random.default_rng(1)
    students = []
    for _ in range(3000):
        u = 1 / (rng.integers(0, 31, 4) + 1.0)
        students.append((rng.normal(0, np.sqrt(0.1 + 1.0 * u)), u))
    stats = error_statistics(students)

    # Execute
    base, per_answer = solve_error(stats)  # type: ignore[misc]
    one_spread = solve_error(stats, with_answers=False)

    # Assert
    assert base == pytest.approx(0.1, abs=0.03) and per_answer == pytest.approx(1.0, abs=0.1)
    assert one_spread == (pytest.approx(stats[3] / stats[0]), 0.0)
    assert solve_error(stats * 10 / stats[0]) is None  # a (noisy) count of 10 students: below the floor
    assert solve_error(stats, floor=5000) is None
    beyond = stats.copy()
    beyond[3] = 1.01 * REACH * stats[0]  # a mean r² beyond what the clip measures
    assert solve_error(beyond) is None and solve_error(stats) is not None


def test_a_stack_whose_errors_the_clip_cannot_measure_serves_no_interval() -> None:
    # Prepare: a released stack that says 0.99 for everyone (as a DP stack fitted on too few students for its noise
    # can saturate): its residuals mostly lie beyond the clip, so a clipped spread would be far too narrow
    data = _students(1000, seed=5)
    saturated = StackingAggregator(weights={}, intercepts={}, pooled_weights={"member": 0.0}, pooled_intercept=0.99)
    assert saturated.aggregate(data.answers[0], ["k0"], mechanism=NO_NOISE).mastery["k0"] == pytest.approx(0.99)

    # Execute
    released = release_measured_error(saturated, data, ["member"], epsilon=1e6, rng=np.random.default_rng(0))

    # Assert
    assert released.error is None and released.to_json() == {}
    assert released.note.startswith("no interval") and "beyond what the clip measures" in released.note


def test_a_dp_released_stack_serves_intervals_that_cover_new_students() -> None:
    # Execute: 20 releases (ε = 4) of a stack fitted on 2000 SIMULATED validation students, each scored on 800 new
    # students of the same generator
    fresh = _students(800, seed=2)
    covers = []
    for seed in range(20):
        error, fitted = _released(2000, 4.0, seed)
        assert error is not None, fitted.notes  # type: ignore[attr-defined]
        covers.append(_cover(error, fresh, fitted.params.aggregator()))  # type: ignore[attr-defined]
    overall, thin, thick = np.array(covers).T

    # Assert: the typical release covers ~90 %; the noise spreads the releases, and blurs thin vs thick evidence
    # (per_answer rests on a small statistic) more than the overall level
    assert 0.85 <= np.median(overall) <= 0.95 and np.quantile(overall, 0.1) >= 0.8
    assert 0.8 <= np.median(thin) <= 0.97 and 0.8 <= np.median(thick) <= 0.97


def test_with_little_noise_the_in_sample_release_covers_thin_and_thick_evidence_as_the_held_out_one_does() -> None:
    # the release's residuals are in-sample under the released stack: with the noise made negligible (ε = 10⁴),
    # what is left is that choice and the clip, and the intervals still cover new students' truths at ~90 %
    error, fitted = _released(1000, 1e4, seed=0)
    assert error is not None and error.per_answer > 0.5
    stack = fitted.params.aggregator()  # type: ignore[attr-defined]
    overall, thin, thick = _cover(error, _students(1500, seed=2), stack)
    assert 0.86 <= overall <= 0.94 and 0.85 <= thin <= 0.95 and 0.85 <= thick <= 0.95


def test_the_record_states_each_part_of_epsilon_and_publishes_only_noisy_values() -> None:
    # Prepare
    data = _students(1000, seed=4)
    fits = [StackingCalibrator().fit(data, release_epsilon=4.0, rng=np.random.default_rng(s)) for s in (0, 1)]
    errors = [MeasuredError.from_json(f.params.measured_error) for f in fits]  # type: ignore[attr-defined]
    # the un-noised statistics under the same released stack (ε so large the noise is nil)
    stack = fits[0].params
    raw = release_measured_error(stack.aggregator(), data, errors[0].members, epsilon=1e12,  # type: ignore[union-attr]
                                 rng=np.random.default_rng(0)).error

    # Assert: the split, as metrics, in the measured error's release and in a note
    fitted, error = fits[0], errors[0]
    assert error is not None and raw is not None and raw.rows == 1000
    assert fitted.metrics["release_epsilon_measured_error"] == pytest.approx(4.0 * ERROR_SHARE)
    parts = [fitted.metrics[f"release_epsilon_{part}"] for part in ("stack", "guard", "measured_error")]
    assert sum(parts) == pytest.approx(4.0)  # the job charges ε per student: the parts compose to it
    assert stack.measured_error["release"]["epsilon"] == pytest.approx(4.0 * ERROR_SHARE)  # type: ignore[attr-defined]
    recorded = stack.release  # type: ignore[attr-defined]
    assert [recorded[p]["epsilon"] for p in ("stack", "guard", "measured_error")] == pytest.approx(parts)
    assert any("2.8 on the stack" in n and "0.4 on the DP guard" in n and "0.8 on its error" in n
               for n in fitted.notes)
    # what is published moves with the noise: neither seed's count or spread is the un-noised one, nor each other's
    for e in errors:
        assert e is not None and e.rows != raw.rows and abs(e.base + e.per_answer - raw.base - raw.per_answer) > 1e-3
    assert (errors[0].base, errors[0].rows) != (errors[1].base, errors[1].rows)  # type: ignore[union-attr]
    notes = " ".join(fitted.notes)
    assert f"{error.base:.3f} + {error.per_answer:.3f}" in notes and f"~{error.rows} students" in notes
    assert f"{raw.base:.3f} + {raw.per_answer:.3f}" not in notes and "held-out" not in notes


def test_a_truth_of_one_is_measured_at_the_clip_not_dropped() -> None:
    from calibration.release_error import _residuals

    r, u = _residuals([(0.6, 1.0, 1)])  # a proportion correct from one right answer
    assert r.tolist() == [-3.0] and u.tolist() == [0.5]
