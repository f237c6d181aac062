"""A DP-released stack that does not subtract (calibration.release_stack, calibration.release_guard): before, the
default real-data calibration (stacking, ε = 4 per student) released per-concept statistics whose noise grew with
the Q-matrix, and served a stack far worse than no calibration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import expit

from calibration import (
    BiasParams,
    CalibrationRecord,
    StackingCalibrator,
    StackingParams,
    ValidationSet,
    make_calibrator,
    validation_mae,
)
from calibration.release_guard import GAIN_CLIP, MARGIN, PLAIN_MEAN, choice_probabilities, guard, student_gains
from calibration.release_stack import RIDGE_TAIL, ridge_for, solve_stack, stack_sensitivity, stack_statistics
from diagnosis import NO_NOISE, ResidualAggregator, StackingAggregator

CONCEPTS = [f"k{i}" for i in range(8)]  # FrcSub's count: the old release's noise grew with it
TOLERANCE = 0.005  # MAE: what "no worse than the plain mean" allows for a stack the guard serves on a noisy margin


def _students(n: int, seed: int) -> ValidationSet:
    """SIMULATED students: each asked about ~60 % of 8 concepts, truth σ(θ), θ ~ N(0, 1.2²); three members — sharp
    (logit error sd 0.4), biased (+1.2 logits, sd 0.6) and noisy (0.3·θ, sd 1.5) — so the plain mean is well beaten
    by weighing them."""
    rng = np.random.default_rng(seed)
    answers, truths = [], []
    for _ in range(n):
        asked = [c for c in CONCEPTS if rng.random() < 0.6] or CONCEPTS[:1]
        theta = {c: rng.normal(0, 1.2) for c in asked}
        truths.append({c: float(expit(t)) for c, t in theta.items()})
        answers.append({
            "sharp": {c: float(expit(t + rng.normal(0, 0.4))) for c, t in theta.items()},
            "biased": {c: float(expit(t + 1.2 + rng.normal(0, 0.6))) for c, t in theta.items()},
            "noisy": {c: float(expit(0.3 * t + rng.normal(0, 1.5))) for c, t in theta.items()},
        })
    return ValidationSet.noiseless(answers, truths)


def _uncalibrated(data: ValidationSet) -> float:
    return validation_mae(BiasParams(alpha=0.0), data)  # no residuals: the plain mean an uncalibrated diagnosis gives


def test_a_dp_released_stack_on_300_students_is_no_worse_than_the_plain_mean_and_on_3000_clearly_better() -> None:
    # Prepare: new students of the same generator
    fresh = _students(2000, seed=99)
    plain = _uncalibrated(fresh)

    # Execute: the default calibration released at ε = 4 per student, as a real cohort is by default
    def released(n: int, seed: int) -> float:
        fitted = StackingCalibrator().fit(_students(n, seed), release_epsilon=4.0, rng=np.random.default_rng(seed))
        return validation_mae(fitted.params, fresh)

    small = [released(300, seed) for seed in range(4)]
    large = [released(3000, seed) for seed in range(3)]

    # Assert (before: 0.37-0.45 at 300 students and 0.18-0.23 at 3000, against the plain mean's 0.115)
    assert max(small) <= plain + TOLERANCE, (small, plain)
    assert max(large) <= 0.8 * plain, (large, plain)


def test_one_replaced_student_moves_the_statistics_by_at_most_the_sensitivity() -> None:
    # Prepare: 40 students with 0-6 rows of three entities; extremes: every corner of the box, one row or many
    rng = np.random.default_rng(0)
    j = 3
    students = [(rng.random((m, j)), rng.random(m)) for m in rng.integers(0, 7, 40)]
    corners = [np.array(c, dtype=float) for c in itertools.product((0.0, 0.5, 1.0), repeat=j + 1)]
    extremes = [(np.zeros((0, j)), np.zeros(0))]  # no complete row
    extremes += [(c[None, :j], c[j:]) for c in corners]
    extremes += [(np.array([a[:j], b[:j]]), np.array([a[j], b[j]])) for a, b in zip(corners, corners[::-1])]
    extremes.append((np.full((3, j), 7.0), np.full(3, -2.0)))  # out of range: the statistics clip what they get
    extremes.append((np.array([[np.nan] * j, [1.0] * j]), np.array([0.5, np.nan])))  # not numbers: rows left out
    delta = stack_sensitivity(j)

    # Execute / Assert: neighbouring cohorts differ by at most Δ₁ in L1, whoever is replaced by whom
    base = stack_statistics(students, j)
    worst = 0.0
    for i in (0, 7, 19):
        for other in extremes:
            moved = np.abs(stack_statistics([*students[:i], other, *students[i + 1:]], j) - base).sum()
            assert moved <= delta + 1e-9
    for a, b in itertools.combinations(extremes, 2):
        worst = max(worst, float(np.abs(stack_statistics([a], j) - stack_statistics([b], j)).sum()))
    assert worst <= delta and delta == 7.0
    assert worst > 0.6 * delta  # the bound is not loose by orders: extremes reach most of it


def test_the_solve_recovers_the_least_squares_stack_and_a_large_ridge_gives_the_plain_mean() -> None:
    # Prepare: exact statistics of a known stack y = 0.1 + 0.5·x₀ + 0.3·x₁ (+ a useless third entity)
    rng = np.random.default_rng(2)
    students = []
    for m in rng.integers(1, 5, 2000):
        x = rng.random((m, 3)) * 0.8
        students.append((x, 0.1 + 0.5 * x[:, 0] + 0.3 * x[:, 1] + rng.normal(0, 0.01, m)))
    stats = stack_statistics(students, 3)

    # Execute
    weights, intercept = solve_stack(stats, 3, ridge=0.0)
    shrunk, shrunk_intercept = solve_stack(stats, 3, ridge=1e9)

    # Assert: no ridge — the least-squares stack; a ridge beyond the data — the plain mean, not zero weights
    assert weights == pytest.approx([0.5, 0.3, 0.0], abs=0.01) and intercept == pytest.approx(0.1, abs=0.01)
    assert shrunk == pytest.approx([1 / 3] * 3, abs=1e-6) and shrunk_intercept == pytest.approx(0.0, abs=1e-6)


def test_the_ridge_bounds_the_noise_on_the_gram_matrix_as_often_as_it_says() -> None:
    # Prepare: the noise the release adds to the Gram matrix of (1, x') for three entities: symmetric, Laplace entries
    rng = np.random.default_rng(3)
    scale, p = 2.5, 4
    ridge = ridge_for(3, scale)

    # Execute: its spectral norm over many draws
    norms = []
    for _ in range(4000):
        upper = np.triu(rng.laplace(0.0, scale, (p, p)))
        norms.append(np.linalg.norm(upper + np.triu(upper, 1).T, 2))

    # Assert: the ridge bounds it at least 1 - RIDGE_TAIL of the time (Gershgorin and a union bound: conservative)
    assert np.mean(np.array(norms) <= ridge) >= 1 - RIDGE_TAIL
    assert ridge == pytest.approx(9.74 * scale, rel=0.01)


def test_the_guard_serves_the_plain_mean_against_a_worse_stack_and_a_better_stack_against_the_plain_mean() -> None:
    # Prepare: 300 students; a stack that leans on the useless member, one that leans on the sharp one
    data = _students(300, seed=5)
    plain = ResidualAggregator(alpha=0.0)
    worse = StackingAggregator(weights={}, intercepts={}, pooled_weights={"noisy": 1.0})
    better = StackingAggregator(weights={}, intercepts={}, pooled_weights={"sharp": 1.0})
    thirds = dict.fromkeys(("sharp", "biased", "noisy"), 1 / 3)
    same = StackingAggregator(weights={}, intercepts={}, pooled_weights=thirds)

    # Execute: many releases of each choice
    def served(*candidates: StackingAggregator) -> dict[str, float]:
        named = {f"c{i}": c for i, c in enumerate(candidates)}
        choices = [guard(named, plain, data, epsilon=0.4, rng=np.random.default_rng(s)).served for s in range(400)]
        return {name: choices.count(name) / len(choices) for name in [PLAIN_MEAN, *named]}

    # Assert: a stack no better than the plain mean (here: the same, every gain 0) is served by chance alone at most
    # 1 / (1 + e^MARGIN) of the time, however many such candidates there are; a better one always wins
    assert served(worse)[PLAIN_MEAN] == 1.0 and served(better)["c0"] == 1.0
    assert served(worse, better, worse)["c1"] == 1.0
    assert np.abs(student_gains(same, plain, data)).max() < 1e-12
    tie = 1 / (1 + np.exp(MARGIN))
    assert 1 - served(same)[PLAIN_MEAN] == pytest.approx(tie, abs=0.035)
    assert 1 - served(same, same, same)[PLAIN_MEAN] == pytest.approx(tie, abs=0.035)
    gains = student_gains(worse, plain, data)
    assert np.abs(gains).max() <= GAIN_CLIP and (gains == GAIN_CLIP).any()  # the clip bounds every student's say


def test_the_guards_choice_is_the_exponential_mechanism_with_its_stated_sensitivity() -> None:
    # Prepare: two neighbouring cohorts' summed gains: replacing one student moves each candidate's sum by at most 2C
    here = {"stack": -1.3, "single:a": 0.4, "single:b": -2.0}
    there = {name: total + shift for (name, total), shift in zip(here.items(), (2 * GAIN_CLIP, -2 * GAIN_CLIP, 2 * GAIN_CLIP))}

    # Execute
    p, q = (choice_probabilities(totals, epsilon=0.4, clip=GAIN_CLIP) for totals in (here, there))

    # Assert: every choice's probability moves by at most e^ε between neighbours (ε-DP), and they sum to one
    assert sum(p.values()) == pytest.approx(1.0) and set(p) == {PLAIN_MEAN, *here}
    assert max(abs(np.log(p[c] / q[c])) for c in p) <= 0.4 + 1e-9


def test_a_cohort_too_small_for_its_noise_gets_the_plain_mean_said_so_and_served_as_an_uncalibrated_diagnosis() -> None:
    # Prepare: 30 students: the stack's noise (ε = 4) swamps what they could teach it
    data, fresh = _students(30, seed=3), _students(200, seed=4)

    # Execute
    fitted = StackingCalibrator().fit(data, release_epsilon=4.0, rng=np.random.default_rng(0))
    record = CalibrationRecord.from_json(CalibrationRecord(id="c", qmatrix_id="q", params=fitted.params).to_json())

    # Assert: the plain mean, said so, the released stack kept for the record, and served as an uncalibrated mean
    params = record.params
    assert isinstance(params, StackingParams) and params.release["guard"]["served"] == "plain mean"
    assert params.weights == {} and params.pooled_weights == {} and params.release["stack"]["weights"]
    assert fitted.metrics["release_stack_served"] == 0.0 and any("PLAIN MEAN is served" in n for n in fitted.notes)
    uncalibrated = ResidualAggregator(alpha=0.0)
    for answers in fresh.answers[:50]:
        concepts = list(answers["sharp"])
        assert record.aggregator().aggregate(answers, concepts, mechanism=NO_NOISE).mastery == pytest.approx(
            uncalibrated.aggregate(answers, concepts, mechanism=NO_NOISE).mastery)


@pytest.mark.parametrize("method", ["paper", "bias", "stacking", "posterior"])
def test_a_dp_release_publishes_no_un_noised_metric_of_the_students(method: str) -> None:
    # Prepare: the metrics the same fit publishes without a release (un-noised statistics of the students)
    data = _students(200, seed=6)
    plain = make_calibrator(method).fit(data)
    secret = {k: v for k, v in plain.metrics.items() if k.startswith(("validation_mae", "selection_cv_mse"))}
    assert secret

    # Execute
    released = make_calibrator(method).fit(data, release_epsilon=4.0, rng=np.random.default_rng(0))

    # Assert: only counts (entities_excluded: released outside ε, docs/privacy.md) and what the release published
    # with noise (each part's ε, the guard's result)
    public = {"n_students", "cv_folds", "entities_excluded"}
    noisy = {"release_epsilon_stack", "release_epsilon_guard", "release_epsilon_measured_error",
             "release_stack_served", "release_single_served"}
    assert set(released.metrics) <= public | noisy, set(released.metrics) - public - noisy
    assert not set(secret) & set(released.metrics)
    assert not any(v == pytest.approx(s) for v in released.metrics.values() for s in secret.values())
    assert any("no validation MAE is published" in n for n in released.notes)


def test_a_dp_release_publishes_no_note_of_the_un_noised_fit() -> None:
    # Prepare: concept k1 has complete rows for 5 students only: the un-noised fit notes it (a count of students)
    rng = np.random.default_rng(1)
    truths = [{"k0": float(rng.random()), **({"k1": 0.5} if n < 5 else {})} for n in range(200)]
    answers = [{e: {c: float(np.clip(t[c] + rng.normal(0, 0.1), 0, 1)) for c in t} for e in ("a", "b")}
               for t in truths]
    data = ValidationSet.noiseless(answers, truths)
    assert any("fewer than" in n for n in StackingCalibrator().fit(data).notes)  # what the plain fit says

    # Execute
    released = StackingCalibrator().fit(data, release_epsilon=4.0, rng=np.random.default_rng(0))

    # Assert: the released record's notes are the release's own
    assert not any("fewer than" in n or "complete validation rows" in n for n in released.notes), released.notes


def test_where_one_member_is_much_better_the_guard_serves_it_alone_rather_than_a_stack_ridged_toward_equal_weights() -> None:
    # Prepare: 300 students; "sharp" is far better than the others, whose equal-weight pull the stack's ridge keeps
    fresh = _students(1000, seed=98)
    alone = StackingAggregator(weights={}, intercepts={}, pooled_weights={"sharp": 1.0})

    # Execute: the default release at ε = 4, several cohorts
    fits = [StackingCalibrator().fit(_students(300, seed), release_epsilon=4.0, rng=np.random.default_rng(seed))
            for seed in range(4)]

    # Assert: "sharp" alone is served on most cohorts, round-trips through the record, answers as sharp does (the
    # plain mean of the others where it did not answer), and the metrics and note say so; nothing served is worse
    # than the plain mean
    chosen = [f.params.release["guard"]["served"] for f in fits]
    assert chosen.count("single:sharp") >= 2, chosen
    fitted = fits[chosen.index("single:sharp")]
    assert fitted.metrics["release_single_served"] == 1.0 and fitted.metrics["release_stack_served"] == 0.0
    assert any("sharp ALONE is served" in n for n in fitted.notes)
    record = CalibrationRecord.from_json(CalibrationRecord(id="c", qmatrix_id="q", params=fitted.params).to_json())
    for answers in fresh.answers[:30]:
        concepts = list(answers["sharp"])
        assert record.aggregator().aggregate(answers, concepts, mechanism=NO_NOISE).mastery == pytest.approx(
            alone.aggregate(answers, concepts, mechanism=NO_NOISE).mastery)
        without = {e: v for e, v in answers.items() if e != "sharp"}
        assert record.aggregator().aggregate(without, concepts, mechanism=NO_NOISE).mastery == pytest.approx(
            ResidualAggregator(alpha=0.0).aggregate(without, concepts, mechanism=NO_NOISE).mastery)
    assert all(validation_mae(f.params, fresh) < _uncalibrated(fresh) for f in fits)
