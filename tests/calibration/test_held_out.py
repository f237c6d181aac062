"""The DP guard scores its candidates by forecasts of held-out responses where the validation students were split
(calibration.held_out, calibration.release_guard; issue 31 part 4): before, it read only the concept truth, whose
absolute error can prefer a blend that forecasts unseen responses worse than its best member alone."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from calibration import (
    CalibrationRecord,
    ItemCheck,
    StackingCalibrator,
    ValidationAnswer,
    ValidationSet,
    item_checks,
    validation_set,
)
from calibration.held_out import check_forecast
from calibration.release_guard import (
    CONCEPT_ERROR,
    FORECAST_CLIP,
    HELD_OUT_FORECASTS,
    MARGIN,
    PLAIN_MEAN,
    choice_probabilities,
    guard,
    guard_statistic,
    student_gains,
)
from diagnosis import NO_NOISE, ResidualAggregator, StackingAggregator
from providers.item_response import ItemResponseFunction
from qmatrix import Response

CONCEPTS = [f"k{i}" for i in range(6)]


def _cohort(n: int, seed: int, *, held: int = 8) -> ValidationSet:
    """SIMULATED students whose concept truth is a compressed reading of their ability (σ(θ/2), as a proportion
    correct is compressed toward ½) while their responses follow σ(θ + c): "sharp" answers σ(θ + noise) — on the
    responses' scale, so it forecasts them best — "flat" answers σ(θ/2 + noise), close to the compressed truth, and
    "blur" is noisy. The concept error then favours leaning on "flat"; held-out forecasts favour "sharp" alone."""
    rng = np.random.default_rng(seed)
    answers, truths, checks = [], [], []
    for _ in range(n):
        theta = {c: rng.normal(0, 1.5) for c in CONCEPTS}
        truths.append({c: float(expit(t / 2)) for c, t in theta.items()})
        answers.append({
            "sharp": {c: float(expit(t + rng.normal(0, 0.3))) for c, t in theta.items()},
            "flat": {c: float(expit(t / 2 + rng.normal(0, 0.1))) for c, t in theta.items()},
            "blur": {c: float(expit(0.3 * t + rng.normal(0, 1.2))) for c, t in theta.items()},
        })
        student = []
        for _ in range(held):
            c, easiness = CONCEPTS[rng.integers(len(CONCEPTS))], rng.normal(0, 1)
            score = float(rng.random() < expit(theta[c] + easiness))
            student.append(ItemCheck(concepts=(c,), prior_theta=(0.0,), alpha=1.0, intercept=easiness, score=score))
        checks.append(student)
    base = ValidationSet.noiseless(answers, truths)
    return ValidationSet(answers=base.answers, truths=base.truths, clean=base.clean, mechanisms=base.mechanisms,
                         checks=checks)


def _without_checks(data: ValidationSet) -> ValidationSet:
    return ValidationSet(answers=data.answers, truths=data.truths, clean=data.clean, mechanisms=data.mechanisms)


def test_with_held_out_responses_the_guard_serves_the_member_that_forecasts_them_not_the_one_nearest_the_truth() -> None:
    # Prepare: the same cohorts with and without their held-out responses
    cohorts = [_cohort(400, seed) for seed in range(3)]

    # Execute: the default DP release (ε = 4 per student)
    def served(data: ValidationSet, seed: int) -> tuple[str, str]:
        fitted = StackingCalibrator().fit(data, release_epsilon=4.0, rng=np.random.default_rng(seed))
        decision = fitted.params.release["guard"]
        return decision["served"], decision["statistic"]

    with_checks = [served(data, seed) for seed, data in enumerate(cohorts)]
    without = [served(_without_checks(data), seed) for seed, data in enumerate(cohorts)]

    # Assert: forecasts pick "sharp" alone; the concept error (the old statistic, still used where nothing was kept
    # back) never does on these cohorts: it prefers what sits near the compressed truth
    assert with_checks == [("single:sharp", HELD_OUT_FORECASTS)] * 3, with_checks
    assert all(statistic == CONCEPT_ERROR for _, statistic in without)
    assert not any(name == "single:sharp" for name, _ in without), without


def test_the_forecast_gain_is_the_summed_brier_difference_clipped_and_zero_for_a_student_with_nothing_kept_back(
) -> None:
    # Prepare: three students; the second kept nothing back, the third many responses the same way (clipped)
    check = ItemCheck(concepts=("a", "b"), prior_theta=(0.0, 0.5), alpha=2.0, intercept=-0.5, score=1.0)
    answers = [{"x": {"a": 0.8}, "y": {"a": 0.4}}, {"x": {"a": 0.9}, "y": {"a": 0.1}}, {"x": {"a": 0.8}, "y": {"a": 0.4}}]
    data = ValidationSet(answers=answers, truths=[{"a": 0.5}] * 3, clean=answers, mechanisms=[NO_NOISE] * 3,
                         checks=[[check, check], [], [check] * 40])
    x_only = StackingAggregator(weights={}, intercepts={}, pooled_weights={"x": 1.0, "y": 0.0})
    plain = ResidualAggregator(alpha=0.0)

    # Execute
    gains = student_gains(x_only, plain, data)

    # Assert: b was not diagnosed, so it stands at the prior (θ = 0.5) in both forecasts
    p_x = expit(2.0 * (np.log(0.8 / 0.2) + 0.5) / 2 - 0.5)
    p_mean = expit(2.0 * (np.log(0.6 / 0.4) + 0.5) / 2 - 0.5)
    assert check_forecast(check, {"a": 0.8}) == pytest.approx(p_x)
    assert gains[0] == pytest.approx(2 * ((p_x - 1) ** 2 - (p_mean - 1) ** 2)) and gains[0] > -FORECAST_CLIP
    assert gains[1] == 0.0 and gains[2] == -FORECAST_CLIP
    assert guard_statistic(data) == HELD_OUT_FORECASTS


def test_one_replaced_student_moves_a_forecast_utility_by_at_most_the_guards_sensitivity() -> None:
    # Prepare: a cohort, and its neighbour with one student replaced by an extreme one (every answer and score flipped)
    data = _cohort(100, seed=7)
    flipped_answers = {e: {c: 1 - v for c, v in values.items()} for e, values in data.answers[0].items()}
    flipped_checks = [ItemCheck(c.concepts, c.prior_theta, c.alpha, c.intercept, 1 - c.score) for c in data.checks[0]]
    neighbour = ValidationSet(answers=[flipped_answers, *data.answers[1:]], truths=data.truths, clean=data.clean,
                              mechanisms=data.mechanisms, checks=[flipped_checks, *data.checks[1:]])
    candidates = [StackingAggregator(weights={}, intercepts={}, pooled_weights={e: 1.0}) for e in ("sharp", "blur")]
    plain = ResidualAggregator(alpha=0.0)

    # Execute / Assert: each student's gain is clipped, so a sum moves by at most 2·FORECAST_CLIP, the sensitivity
    # the mechanism is told
    for candidate in candidates:
        here, there = student_gains(candidate, plain, data), student_gains(candidate, plain, neighbour)
        assert np.abs(here).max() <= FORECAST_CLIP and np.abs(there).max() <= FORECAST_CLIP
        assert abs(here.sum() - there.sum()) <= 2 * FORECAST_CLIP + 1e-12
    decision = guard({"c": candidates[0]}, plain, data, epsilon=0.4, rng=np.random.default_rng(0))
    assert decision.to_json()["sensitivity"] == 2 * FORECAST_CLIP


def test_the_record_says_what_the_guard_compared_and_the_choice_round_trips() -> None:
    # Prepare
    data = _cohort(300, seed=11)

    # Execute
    fitted = StackingCalibrator().fit(data, release_epsilon=4.0, rng=np.random.default_rng(0))
    record = CalibrationRecord.from_json(CalibrationRecord(id="c", qmatrix_id="q", params=fitted.params).to_json())

    # Assert: the statistic is stated in the release and the note; no statistic of the students is published
    decision = record.params.release["guard"]
    assert decision["statistic"] == HELD_OUT_FORECASTS and "Brier" in decision["utility"]
    assert decision["sensitivity"] == 2 * FORECAST_CLIP and decision["gain_clip"] == FORECAST_CLIP
    assert decision["baseline"] == "stack"  # the DP release measures every gain from its released stack
    assert any("summed Brier score changes of held-out forecasts" in n for n in fitted.notes)


def test_the_statistic_and_its_sensitivity_do_not_depend_on_which_students_had_responses_to_keep_back() -> None:
    # Prepare: a split cohort where only the first student had responses to keep back, and its neighbour where that
    # student is replaced by one with none (a single response: nothing kept back)
    data = _cohort(50, seed=3)
    only_first = [data.checks[0], *([[]] * 49)]
    here = ValidationSet(answers=data.answers, truths=data.truths, clean=data.clean, mechanisms=data.mechanisms,
                         checks=only_first)
    there = ValidationSet(answers=data.answers, truths=data.truths, clean=data.clean, mechanisms=data.mechanisms,
                          checks=[[]] * 50)
    plain = ResidualAggregator(alpha=0.0)
    sharp = StackingAggregator(weights={}, intercepts={}, pooled_weights={"sharp": 1.0})

    # Execute
    decisions = [guard({"s": sharp}, plain, d, epsilon=0.4, rng=np.random.default_rng(0)) for d in (here, there)]

    # Assert: both compare held-out forecasts with the same sensitivity (before a fix, the second fell back to the
    # concept error, with a tenth of the sensitivity: the published statistic told the neighbours apart)
    assert [d.statistic for d in decisions] == [HELD_OUT_FORECASTS] * 2
    assert {d.to_json()["sensitivity"] for d in decisions} == {2 * FORECAST_CLIP}
    assert not student_gains(sharp, plain, there).any()


def test_a_validation_set_keeps_each_students_checks_through_subsets_and_dropped_students() -> None:
    # Prepare: three answered students, the middle one with no answer (validation_set drops it)
    checks = [[ItemCheck(("a",), (0.0,), 1.0, 0.0, float(i % 2))] for i in range(3)]
    students = [ValidationAnswer(answers={"x": {"a": 0.3 * i}} if i != 1 else {}, mechanism=NO_NOISE,
                                 truth={"a": 0.5}, evidence={"a": 1}) for i in range(3)]

    # Execute
    data = validation_set(students, keep_clean=False, checks=checks)

    # Assert
    assert data.checks == [checks[0], checks[2]]
    assert data.subset([1]).checks == [checks[2]] and data.without(["x"]).checks == data.checks
    with pytest.raises(ValueError, match="held-out check"):
        validation_set(students, keep_clean=False, checks=checks[:2])
    with pytest.raises(ValueError, match="held-out checks"):
        ValidationSet(answers=data.answers, truths=data.truths, clean=None, mechanisms=data.mechanisms, checks=[[]])


def test_item_checks_read_the_serving_models_parameters_and_skip_items_it_does_not_list() -> None:
    # Prepare
    irf = ItemResponseFunction(model="m", item_ids=("i1", "i2"), concepts=(("a",), ("a", "b")),
                               alpha=np.array([1.5, 0.7]), intercept=np.array([0.2, -1.0]),
                               basis=("trained", "trained"), prior_mean={"a": 0.1, "b": -0.3}, prior_sd={})

    # Execute
    checks = item_checks(irf, [Response(item_id="i2", correct=0.75), Response(item_id="gone", correct=1.0)])

    # Assert
    assert checks == [ItemCheck(concepts=("a", "b"), prior_theta=(0.1, -0.3), alpha=0.7, intercept=-1.0, score=0.75)]


def _two_members(n: int, seed: int, held: int) -> ValidationSet:
    """SIMULATED students of one concept, θ ~ N(0, 1.5²), ``held`` kept-back responses each, right with σ(θ) (an
    item of α 1, c 0, so a forecast is the mastery itself): "good" answers σ(θ), "bad" 1 − σ(θ) (the plain mean of
    the two is ½ for everyone)."""
    rng = np.random.default_rng(seed)
    answers, checks = [], []
    for _ in range(n):
        p = float(expit(rng.normal(0, 1.5)))
        answers.append({"good": {"a": p}, "bad": {"a": 1 - p}})
        checks.append([ItemCheck(("a",), (0.0,), 1.0, 0.0, float(rng.random() < p)) for _ in range(held)])
    return ValidationSet(answers=answers, truths=[{"a": 0.5}] * n, clean=answers, mechanisms=[NO_NOISE] * n,
                         checks=checks)


def test_measured_from_the_stack_the_clip_no_longer_levels_a_member_much_better_than_the_plain_mean() -> None:
    # Prepare: "good" alone and a stack leaning on it (0.8 good, 0.2 bad) both beat the plain mean by more than the
    # clip on most students; "good" and the stack differ by less than the clip on most
    data = _two_members(300, seed=21, held=30)
    plain = ResidualAggregator(alpha=0.0)
    good = StackingAggregator(weights={}, intercepts={}, pooled_weights={"good": 1.0, "bad": 0.0})
    stack = StackingAggregator(weights={}, intercepts={}, pooled_weights={"good": 0.8, "bad": 0.2})
    named = {"stack": stack, "single:good": good}
    clipped = [float((np.abs(student_gains(c, plain, data)) == FORECAST_CLIP).mean()) for c in (good, stack)]
    assert min(clipped) > 0.6 and (np.abs(student_gains(good, stack, data)) == FORECAST_CLIP).mean() < 0.5

    # Execute
    from_plain = [guard(named, plain, data, epsilon=0.4, rng=np.random.default_rng(s)).served for s in range(200)]
    from_stack = [guard(named, plain, data, epsilon=0.4, rng=np.random.default_rng(s), baseline="stack").served
                  for s in range(200)]

    # Assert: measured from the stack, "good" alone is served; from the plain mean the clip hides most of its lead;
    # the plain mean is never served (far worse, whatever the baseline)
    assert from_stack.count("single:good") / 200 > 0.95
    assert from_plain.count("single:good") / 200 < 0.8
    assert PLAIN_MEAN not in from_stack and PLAIN_MEAN not in from_plain


def test_the_choice_is_the_same_from_any_baseline_where_nothing_is_clipped() -> None:
    # Prepare: summed gains measured from the plain mean, and the same measured from candidate "a"
    from_plain = {"a": -3.0, "b": 1.0, "c": -0.5}
    from_a = {name: total - from_plain["a"] for name, total in from_plain.items()}

    # Execute
    here = choice_probabilities(from_plain, epsilon=0.4, clip=FORECAST_CLIP)
    there = choice_probabilities(from_a, epsilon=0.4, clip=FORECAST_CLIP, plain_gain=0.0 - from_plain["a"])

    # Assert: the exponential mechanism is shift-invariant, so only the clip makes the baseline matter
    assert here == pytest.approx(there, abs=1e-12)


def test_with_a_baseline_the_mechanism_stays_private_and_the_plain_mean_keeps_its_margin() -> None:
    # Prepare: neighbouring cohorts' sums measured from a baseline: every utility, the plain mean's included, moves
    # by at most twice the clip
    here = {"stack": 0.0, "single:a": -1.2, "single:b": 0.7}
    there = {"stack": 0.0, "single:a": -1.2 + 2 * FORECAST_CLIP, "single:b": 0.7 - 2 * FORECAST_CLIP}
    p = choice_probabilities(here, epsilon=0.4, clip=FORECAST_CLIP, plain_gain=0.3)
    q = choice_probabilities(there, epsilon=0.4, clip=FORECAST_CLIP, plain_gain=0.3 - 2 * FORECAST_CLIP)
    assert max(abs(np.log(p[c] / q[c])) for c in p) <= 0.4 + 1e-9

    # Execute: candidates that are all the plain mean (every gain 0), measured from one of them
    data = _two_members(100, seed=2, held=5)
    plain = ResidualAggregator(alpha=0.0)
    same = StackingAggregator(weights={}, intercepts={}, pooled_weights={"good": 0.5, "bad": 0.5})
    named = {"stack": same, "single:same": same}
    served = [guard(named, plain, data, epsilon=0.4, rng=np.random.default_rng(s), baseline="stack").served
              for s in range(400)]

    # Assert: one of them is served by chance alone at most 1/(1 + e^MARGIN) of the time; the plain mean as a
    # baseline is the plain mean; an unknown baseline is refused, naming the candidates
    assert 1 - served.count(PLAIN_MEAN) / 400 <= 1 / (1 + np.exp(MARGIN)) + 0.035
    decision = guard(named, plain, data, epsilon=0.4, rng=np.random.default_rng(0), baseline=PLAIN_MEAN)
    assert decision.baseline == PLAIN_MEAN
    with pytest.raises(ValueError, match="single:same"):
        guard(named, plain, data, epsilon=0.4, rng=np.random.default_rng(0), baseline="nope")
