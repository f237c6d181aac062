"""The IRT baseline's empirical item prior (issue 31): rare items stay sane, the prior is the item bank's, and the
EM stays monotone; and the same 2PL as a published package (girth) where that package is installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from evaluation.baselines import IRT2PL, ItemPrior, irt_2pl_prob
from evaluation.baselines.irt_compare import OLD_PRIOR, HeldoutMatrices, girth_2pl
from evaluation.metrics import auc


def simulate(rng: np.random.Generator, n_students: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    theta = rng.normal(0, 1, n_students)
    return (rng.random((n_students, a.size)) < irt_2pl_prob(theta, a, b)).astype(float), theta


def sparse_bank(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """400 students, 20 common items everyone answers and 300 rare ones answered by 2–4 students each."""
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(0.7, 1.8, 320), rng.normal(-0.5, 1.0, 320)
    x, theta = simulate(rng, 400, a, b)
    mask = np.zeros_like(x, dtype=bool)
    mask[:, :20] = True
    for i in range(20, 320):
        mask[rng.choice(400, size=rng.integers(2, 5), replace=False), i] = True
    return np.where(mask, x, np.nan), theta, a, b


def test_rare_items_keep_finite_difficulties_and_forecast_better_than_under_the_old_wide_prior() -> None:
    x, theta, a, b = sparse_bank(0)
    q = np.ones((x.shape[1], 1))
    new, old = IRT2PL().fit(x, q), IRT2PL(**OLD_PRIOR).fit(x, q)
    rare = slice(20, None)
    assert np.abs(new.b_[rare]).max() < 6 < np.abs(old.b_[rare]).max()
    # forecast every rare item for every student from the 20 common answers (the truth: the generating model)
    common = np.where(np.arange(x.shape[1]) < 20, np.where(np.isnan(x), 0.0, x), np.nan)
    truth = irt_2pl_prob(theta, a, b)[:, rare]

    def error(model: IRT2PL) -> float:
        return float(np.mean((model.predict_proba(common)[:, rare] - truth) ** 2))

    assert error(new) < 0.8 * error(old)


def test_the_estimated_prior_is_the_item_banks_distribution() -> None:
    rng = np.random.default_rng(1)
    a, c = np.clip(rng.normal(1.2, 0.3, 80), 0.3, None), rng.normal(0.5, 1.0, 80)
    x, _ = simulate(rng, 1500, a, -c / a)
    model = IRT2PL().fit(x, np.ones((80, 1)))
    prior = model.prior_
    assert prior.intercept_mean == pytest.approx(c.mean(), abs=0.15)
    assert prior.intercept_sd == pytest.approx(c.std(), abs=0.2)
    assert prior.slope_mean == pytest.approx(a.mean(), abs=0.2)
    assert 0.05 <= prior.slope_sd < 0.6


def test_em_with_the_settled_prior_is_monotone_and_unanswered_items_get_the_prior_mode() -> None:
    x, _, _, _ = sparse_bank(2)
    x[:, 5] = np.nan  # a common item nobody answered in training
    model = IRT2PL().fit(x, np.ones((x.shape[1], 1)))
    assert model.converged_ and np.all(np.diff(model.loglik_trace_) >= 0)
    assert model.a_[5] == pytest.approx(model.prior_.slope_mean, abs=1e-6)
    assert -model.a_[5] * model.b_[5] == pytest.approx(model.prior_.intercept_mean, abs=1e-6)


def test_a_fixed_prior_stays_as_given() -> None:
    x, _, _, _ = sparse_bank(3)
    model = IRT2PL(**OLD_PRIOR).fit(x, np.ones((x.shape[1], 1)))
    assert model.prior_ == ItemPrior(1.0, 2.0, 0.0, 5.0)


def test_restricting_a_split_to_items_renumbers_the_hidden_responses() -> None:
    m = HeldoutMatrices(train=np.arange(8.0).reshape(2, 4), q=np.eye(4, dtype=int), test_observed=np.zeros((1, 4)),
                        student=np.array([0, 0, 0]), item=np.array([3, 1, 2]), y=np.array([1.0, 0.0, 1.0]))
    sub = m.restrict(np.array([1, 3]))
    np.testing.assert_array_equal(sub.train, [[1, 3], [5, 7]])
    np.testing.assert_array_equal(sub.item, [1, 0])
    np.testing.assert_array_equal(sub.y, [1.0, 0.0])
    np.testing.assert_array_equal(sub.q, [[1, 0], [0, 1]])  # concepts of dropped items dropped too


@pytest.mark.skipif(importlib.util.find_spec("girth") is None, reason="girth (fedcd[irt-yardstick]) not installed")
def test_our_2pl_matches_girths_marginal_ml_2pl_on_dense_data() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.uniform(0.6, 2.2, 15), rng.normal(0, 1, 15)
    x, theta = simulate(rng, 600, a, b)
    train, test = x[:400], x[400:]
    ours = IRT2PL().fit(train, np.ones((15, 1)))
    ga, gb = girth_2pl(train)
    assert np.corrcoef(ours.b_, gb)[0, 1] > 0.97 and np.corrcoef(ours.a_, ga)[0, 1] > 0.75  # slopes: noisier
    # forecast the last 5 items of each test student from the first 10, with both sets of item parameters
    shown = np.where(np.arange(15) < 10, test, np.nan)
    y = test[:, 10:].ravel()
    theirs = IRT2PL(**OLD_PRIOR).fit(train, np.ones((15, 1)))  # a fitted shell to hold girth's parameters
    theirs.a_, theirs.b_ = ga, gb
    p_ours, p_theirs = ours.predict_proba(shown)[:, 10:].ravel(), theirs.predict_proba(shown)[:, 10:].ravel()
    assert abs(auc(p_ours, y) - auc(p_theirs, y)) < 0.005
