"""Classical CDM baselines: hand-computed cases, recovery of known parameters, real-data convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.baselines import (
    DINA,
    DINASettings,
    IRT2PL,
    NotFittedError,
    ProportionCorrect,
    dina_log_likelihood,
    dina_posterior,
    eap,
    irt_2pl_prob,
    normal_quadrature,
    profile_classes,
    proportion_correct,
    response_matrix,
)
from qmatrix import QMatrixError, Response, StudentResponses, default_data_dir, example_qmatrix

HAS_FRCSUB = (default_data_dir() / "frcsub").is_dir()
HAS_ASSIST = (default_data_dir() / "assist0910").is_dir()
needs_frcsub = pytest.mark.skipif(not HAS_FRCSUB, reason="real data folder (../shared/data/frcsub) absent")

# 2 concepts, 3 items: item 1 needs c1, item 2 needs c2, item 3 needs both.
Q3 = np.array([[1, 0], [0, 1], [1, 1]])


def simulate_dina(q: np.ndarray, n: int, rng: np.random.Generator, rate: float) -> tuple[np.ndarray, ...]:
    """Responses, true attributes, and the per-item slip and guess they were drawn with."""
    slip, guess = rng.uniform(0.05, 0.25, q.shape[0]), rng.uniform(0.05, 0.25, q.shape[0])
    alpha = rng.random((n, q.shape[1])) < rate
    eta = (alpha[:, None, :] | (q == 0)[None, :, :]).all(axis=2)
    responses = (rng.random(eta.shape) < np.where(eta, 1 - slip, guess)).astype(float)
    return responses, alpha, slip, guess


def recovery_q() -> np.ndarray:
    """FrcSub's Q-matrix when the data are present; otherwise a small identifiable one.

    (The project's example Q-matrix is not used: two of its concepts appear in only two
    items each, so the saturated DINA model's slip and guess are not identified on it.)
    """
    if HAS_FRCSUB:
        from qmatrix import load_frcsub

        return load_frcsub().qmatrix.matrix.astype(int)
    eye = np.eye(5, dtype=int)
    extra = [[1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1], [1, 0, 0, 0, 1], [1, 0, 1, 0, 1]]
    return np.vstack([eye, eye, extra])


def oracle_accuracy(responses: np.ndarray, alpha: np.ndarray, q: np.ndarray, slip, guess, rate: float) -> float:
    """Attribute accuracy of the posterior under the TRUE parameters and prior (the ceiling)."""
    k = q.shape[1]
    profiles = (np.arange(2**k)[:, None] >> np.arange(k)) & 1
    eta = (profiles[:, None, :] | (q == 0)[None, :, :]).all(axis=2)
    prior = np.prod(np.where(profiles == 1, rate, 1 - rate), axis=1)
    mastery = dina_posterior(responses, eta, slip, guess, prior) @ profiles
    return float(((mastery >= 0.5) == alpha).mean())


def assert_non_decreasing(trace: list[float]) -> None:
    steps = np.diff(trace)
    assert (steps >= -1e-9 * np.abs(trace[1:])).all(), f"objective decreased: min step {steps.min()}"


# --- response matrix ---------------------------------------------------------------------
def test_response_matrix_follows_qmatrix_item_order_with_nan_for_missing_and_mean_of_repeats() -> None:
    q = example_qmatrix()
    first, second = q.item_ids[0], q.item_ids[2]
    students = [
        StudentResponses(student_id="a", responses=(Response(item_id=second, correct=True),)),
        StudentResponses(
            student_id="b",
            responses=(Response(item_id=first, correct=0.5), Response(item_id=first, correct=True)),
        ),
    ]
    matrix = response_matrix(students, q)
    assert matrix.shape == (2, len(q.items))
    assert matrix[0, 2] == 1.0 and matrix[1, 0] == 0.75
    assert np.isnan(matrix).sum() == 2 * len(q.items) - 2


def test_response_matrix_rejects_items_the_qmatrix_does_not_define() -> None:
    student = StudentResponses(student_id="a", responses=(Response(item_id="nope", correct=True),))
    with pytest.raises(QMatrixError, match="nope"):
        response_matrix([student], example_qmatrix())


# --- proportion-correct ------------------------------------------------------------------
def test_proportion_correct_is_mean_score_per_concept_by_hand() -> None:
    responses = np.array([[1, 0, 1], [np.nan, 1, 0], [0.5, np.nan, np.nan]])
    expected = np.array([[1.0, 0.5], [0.0, 0.5], [0.5, np.nan]])
    np.testing.assert_allclose(proportion_correct(responses, Q3), expected)


def test_proportion_fallback_is_the_training_mean_or_nan_when_asked() -> None:
    train = np.array([[1, 0, 1], [np.nan, 1, 0], [1, 1, 1]])  # concept means (1+0+1)/3 and (.5+.5+1)/3
    new = np.array([[1, np.nan, np.nan]])
    np.testing.assert_allclose(ProportionCorrect().fit(train, Q3).mastery(new), [[1.0, 2 / 3]])
    np.testing.assert_allclose(ProportionCorrect(fallback="nan").fit(train, Q3).mastery(new), [[1.0, np.nan]])


def test_proportion_predict_proba_is_the_mean_mastery_over_the_items_concepts() -> None:
    train = np.array([[1, 0, 1], [np.nan, 1, 0], [1, 1, 1]])
    model = ProportionCorrect().fit(train, Q3)
    np.testing.assert_allclose(model.predict_proba(np.array([[1, np.nan, np.nan]])), [[1.0, 2 / 3, 5 / 6]])


# --- DINA by hand ------------------------------------------------------------------------
def test_profile_classes_merge_profiles_with_the_same_ideal_responses() -> None:
    classes = profile_classes(np.array([[1, 1]]))  # one item needing both: 00, 10, 01 look alike
    order = np.argsort(classes.eta[:, 0])
    np.testing.assert_array_equal(classes.size[order], [3, 1])
    np.testing.assert_allclose(classes.share[order], [[1 / 3, 1 / 3], [1, 1]])
    np.testing.assert_array_equal(classes.class_of_profile, [order[0]] * 3 + [order[1]])


def test_dina_posterior_matches_hand_computation() -> None:
    # profiles 00, 10, 01, 11 -> ideal responses on Q3
    eta = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 1]])
    slip, guess, prior = np.array([0.1, 0.2, 0.1]), np.array([0.2, 0.1, 0.3]), np.array([0.1, 0.2, 0.3, 0.4])
    # x = (1, 0, unanswered): L = .2·.9, .9·.9, .2·.2, .9·.2; joint = .018, .162, .012, .072 (sum .264)
    post = dina_posterior(np.array([[1.0, 0.0, np.nan]]), eta, slip, guess, prior)
    np.testing.assert_allclose(post, [[3 / 44, 27 / 44, 2 / 44, 12 / 44]])
    profiles = np.array([[0, 0], [1, 0], [0, 1], [1, 1]])
    np.testing.assert_allclose(post @ profiles, [[39 / 44, 14 / 44]])


def test_dina_partial_credit_is_a_bernoulli_weight() -> None:
    eta, slip, guess = np.array([[1, 0, 0]]), np.array([0.1, 0.2, 0.1]), np.array([0.2, 0.1, 0.3])
    half = dina_log_likelihood(np.array([[0.5, 0.5, 0.5]]), eta, slip, guess)
    ones = dina_log_likelihood(np.ones((1, 3)), eta, slip, guess)
    zeros = dina_log_likelihood(np.zeros((1, 3)), eta, slip, guess)
    np.testing.assert_allclose(half, (ones + zeros) / 2)


# --- IRT by hand -------------------------------------------------------------------------
def test_irt_2pl_probability_by_hand() -> None:
    p = irt_2pl_prob(np.array([1.0, 0.5]), np.array([2.0]), np.array([0.5]))
    np.testing.assert_allclose(p[:, 0], [1 / (1 + math.exp(-1.0)), 0.5])


def test_normal_quadrature_reproduces_standard_normal_moments() -> None:
    nodes, weights = normal_quadrature(41)
    assert weights.sum() == pytest.approx(1.0)
    assert weights @ nodes == pytest.approx(0.0, abs=1e-12)
    assert weights @ nodes**2 == pytest.approx(1.0) and weights @ nodes**4 == pytest.approx(3.0)


def test_eap_on_a_tiny_grid_matches_hand_computation() -> None:
    nodes, weights = np.array([-1.0, 0.0, 1.0]), np.array([0.25, 0.5, 0.25])
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    # items (a, b) = (1, 0) answered right, (2, 0.5) answered wrong
    joint = [w * sig(t) * (1 - sig(2 * (t - 0.5))) for t, w in zip(nodes, weights, strict=True)]
    expected = np.array(joint) / sum(joint)
    theta, post = eap(np.array([[1.0, 0.0]]), np.array([1.0, 2.0]), np.array([0.0, 0.5]), nodes, weights)
    np.testing.assert_allclose(post[0], expected)
    assert theta[0] == pytest.approx(expected @ nodes)


# --- recovery on simulated data ------------------------------------------------------------
def test_dina_recovers_slip_and_guess_on_simulated_data() -> None:
    q = recovery_q()
    responses, _, slip, guess = simulate_dina(q, 2000, np.random.default_rng(1), rate=0.6)
    model = DINA().fit(responses, q)
    assert model.method_ == "exact"
    assert np.abs(np.r_[model.slip_ - slip, model.guess_ - guess]).mean() < 0.03


def test_dina_attribute_classification_is_near_the_oracle_and_well_above_chance() -> None:
    q = recovery_q()
    responses, alpha, slip, guess = simulate_dina(q, 2000, np.random.default_rng(2), rate=0.5)
    accuracy = float(((DINA().fit(responses, q).mastery(responses) >= 0.5) == alpha).mean())
    assert accuracy >= 0.65  # chance is 0.5
    assert accuracy >= oracle_accuracy(responses, alpha, q, slip, guess, rate=0.5) - 0.03


def test_irt_recovers_known_2pl_parameters_with_missing_responses() -> None:
    rng = np.random.default_rng(3)
    a, b, theta = rng.uniform(0.6, 2.5, 20), rng.normal(0, 1, 20), rng.normal(0, 1, 2000)
    responses = (rng.random((2000, 20)) < irt_2pl_prob(theta, a, b)).astype(float)
    responses[rng.random(responses.shape) < 0.1] = np.nan
    model = IRT2PL().fit(responses, np.ones((20, 1)))
    assert np.corrcoef(model.b_, b)[0, 1] > 0.95
    assert np.corrcoef(model.a_, a)[0, 1] > 0.8


def test_mean_field_dina_recovers_30_attributes_well_above_chance() -> None:
    rng = np.random.default_rng(4)
    q = np.zeros((120, 30), dtype=int)
    for i in range(120):
        q[i, rng.choice(30, size=rng.choice([1, 1, 2, 3]), replace=False)] = 1
    responses, alpha, _, _ = simulate_dina(q, 1000, rng, rate=0.5)
    responses[rng.random(responses.shape) < 0.3] = np.nan
    model = DINA().fit(responses, q)
    assert model.method_ == "mean-field"
    assert_non_decreasing(model.loglik_trace_)
    assert float(((model.mastery(responses) >= 0.5) == alpha).mean()) > 0.75  # chance is 0.5


# --- applying to new students ------------------------------------------------------------
MODELS = [ProportionCorrect, IRT2PL, DINA, lambda: DINA(DINASettings(method="mean-field"))]


@pytest.mark.parametrize("make", MODELS, ids=["proportion", "irt", "dina", "dina-mean-field"])
def test_new_students_get_probabilities_of_the_right_shape_despite_missing_responses(make) -> None:
    q = recovery_q()
    rng = np.random.default_rng(5)
    responses, _, _, _ = simulate_dina(q, 400, rng, rate=0.5)
    responses[rng.random(responses.shape) < 0.3] = np.nan
    model = make().fit(responses[:300], q)
    new = responses[300:].copy()
    new[0] = np.nan  # a student who answered nothing
    proba, mastery = model.predict_proba(new), model.mastery(new)
    assert proba.shape == (100, q.shape[0]) and mastery.shape == (100, q.shape[1])
    for values in (proba, mastery):
        assert np.isfinite(values).all() and values.min() >= 0.0 and values.max() <= 1.0
    np.testing.assert_allclose(model.predict_proba(new, items=np.array([2, 0])), proba[:, [2, 0]])


def test_a_student_with_no_responses_gets_the_population_prior() -> None:
    q = recovery_q()
    responses, _, _, _ = simulate_dina(q, 500, np.random.default_rng(6), rate=0.5)
    blank = np.full((1, q.shape[0]), np.nan)
    irt = IRT2PL().fit(responses, q)
    np.testing.assert_allclose(irt.posterior(blank)[0], irt.weights_)
    dina = DINA().fit(responses, q)
    np.testing.assert_allclose(dina.mastery(blank)[0], dina.class_prior_ @ dina.classes_.share)


@pytest.mark.parametrize("make", MODELS[:3], ids=["proportion", "irt", "dina"])
def test_using_a_model_before_fit_raises(make) -> None:
    with pytest.raises(NotFittedError):
        make().mastery(np.zeros((1, 3)))


@pytest.mark.parametrize(
    "make",
    [
        lambda: IRT2PL(n_nodes=2),
        lambda: IRT2PL(slope_bounds=(0.0, 6.0)),
        lambda: DINA(DINASettings(bounds=(1e-3, 0.6))),
        lambda: DINA(DINASettings(method="joint")),
        lambda: DINA(DINASettings(init_slip=0.7)),
        lambda: ProportionCorrect(fallback="half"),  # type: ignore[arg-type]
    ],
)
def test_invalid_settings_are_rejected(make) -> None:
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("bad", [np.full((2, 3), 2.0), np.zeros((2, 4))], ids=["score>1", "wrong-width"])
def test_invalid_response_matrices_are_rejected(bad) -> None:
    with pytest.raises(ValueError):
        ProportionCorrect().fit(bad, Q3)


# --- real data -----------------------------------------------------------------------------
@needs_frcsub
@pytest.mark.parametrize("make", [IRT2PL, DINA], ids=["irt", "dina"])
def test_em_on_frcsub_converges_with_a_non_decreasing_log_likelihood(make) -> None:
    from qmatrix import load_frcsub

    data = load_frcsub()
    model = make().fit(response_matrix(data.students, data.qmatrix), data.qmatrix.matrix)
    assert model.converged_ and len(model.loglik_trace_) > 2
    assert_non_decreasing(model.loglik_trace_)


@pytest.mark.skipif(not HAS_ASSIST, reason="real data folder (../shared/data/assist0910) absent")
def test_mean_field_dina_handles_assist0910_with_110_skills() -> None:
    from qmatrix import load_assist0910

    data = load_assist0910(max_students=300)
    responses = response_matrix(data.students, data.qmatrix)
    model = DINA().fit(responses[:250], data.qmatrix.matrix)
    assert model.method_ == "mean-field" and model.converged_
    assert_non_decreasing(model.loglik_trace_)
    assert model.mastery(responses[250:]).shape == (50, 110)


# --- NCDM ----------------------------------------------------------------------------------------
def test_ncdm_learns_held_out_responses_and_is_monotone_in_mastery() -> None:
    from evaluation.baselines import NCDM, NCDMSettings
    from evaluation.metrics import auc

    # Prepare: SIMULATED DINA students; a fifth of the new students' answers hidden.
    q = recovery_q()
    rng = np.random.default_rng(7)
    responses, _, _, _ = simulate_dina(q, 500, rng, rate=0.5)
    new = responses[400:].copy()
    hidden = rng.random(new.shape) < 0.2
    observed = np.where(hidden, np.nan, new)
    # Execute
    model = NCDM(NCDMSettings(hidden=(64, 32), threads=1)).fit(responses[:400], q)
    students, items = np.nonzero(hidden)
    probs = model.predict_pairs(observed, students, items)
    # Assert: well above chance on hidden answers (DINA, the generating family, reaches 0.73 on the fallback
    # Q-matrix and more on FrcSub's); pairs agree with the full matrix; more mastery never hurts.
    assert auc(probs, new[students, items]) > 0.65
    np.testing.assert_allclose(probs, model.predict_proba(observed)[students, items], rtol=1e-5)
    assert model.mastery(observed).shape == (100, q.shape[1]) and model.epochs_ >= 1
    grid = np.linspace(0, 1, 11)[:, None].repeat(q.shape[1], axis=1)
    for item in range(q.shape[0]):
        assert np.all(np.diff(model.response_probability(grid, np.full(11, item))) >= -1e-9)
    with pytest.raises(NotFittedError):
        NCDM().mastery(np.zeros((1, 3)))
