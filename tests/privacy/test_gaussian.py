"""Analytic Gaussian mechanism: σ against an independent implementation, the exact condition, and releases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from privacy.gaussian import (
    AnalyticGaussianMechanism,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
)
from privacy.mechanisms import make_rng
from privacy.sampling import RELEASE_GRID
from privacy.ranges import DELTA_MAX, EPSILON_MAX


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _balle_wang_algorithm_1(epsilon: float, delta: float, sensitivity: float) -> float:
    """Balle & Wang (2018), Algorithm 1, written independently: the v*/u* parametrisation, erfc and brentq."""
    delta_0 = _phi(0.0) - math.exp(epsilon) * _phi(-math.sqrt(2 * epsilon))
    if delta >= delta_0:
        def b_plus(v: float) -> float:
            return _phi(math.sqrt(epsilon * v)) - math.exp(epsilon) * _phi(-math.sqrt(epsilon * (v + 2))) - delta

        hi = 1.0
        while b_plus(hi) < 0:
            hi *= 2
        v = brentq(b_plus, 0.0, hi, xtol=1e-14, rtol=1e-14)
        alpha = math.sqrt(1 + v / 2) - math.sqrt(v / 2)
    else:
        def b_minus(u: float) -> float:
            return _phi(-math.sqrt(epsilon * u)) - math.exp(epsilon) * _phi(-math.sqrt(epsilon * (u + 2))) - delta

        hi = 1.0
        while b_minus(hi) > 0:
            hi *= 2
        u = brentq(b_minus, 0.0, hi, xtol=1e-14, rtol=1e-14)
        alpha = math.sqrt(1 + u / 2) + math.sqrt(u / 2)
    return alpha * sensitivity / math.sqrt(2 * epsilon)


def test_known_value() -> None:
    # ε = 1, δ = 1e-5, Δ = 1: σ ≈ 3.73 (the classical formula gives 4.84, and is not valid at ε = 1).
    sigma = analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    assert sigma == pytest.approx(3.7306, abs=1e-4)
    assert sigma == pytest.approx(_balle_wang_algorithm_1(1.0, 1e-5, 1.0), rel=1e-8)


@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-9])
def test_sigma_matches_independent_algorithm(epsilon: float, delta: float) -> None:
    ours = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=1.0)
    assert ours == pytest.approx(_balle_wang_algorithm_1(epsilon, delta, 1.0), rel=1e-7)


@pytest.mark.parametrize("epsilon,delta", [(0.1, 1e-5), (1.0, 1e-6), (4.0, 1e-9), (0.01, DELTA_MAX)])
def test_condition_holds_with_equality(epsilon: float, delta: float) -> None:
    sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=2.5)
    assert gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=2.5) <= delta
    assert gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=2.5) == pytest.approx(delta, rel=1e-8)
    assert gaussian_delta(epsilon=epsilon, sigma=sigma * (1 - 1e-9), sensitivity=2.5) > delta  # smallest σ


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_smaller_than_classical_sigma(epsilon: float, delta: float) -> None:
    analytic = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=1.0)
    assert analytic < classical_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=1.0)


def test_sigma_scales_with_sensitivity_and_decreases_with_budget() -> None:
    one = analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    assert analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=3.0) == pytest.approx(3 * one, rel=1e-10)
    assert analytic_gaussian_sigma(epsilon=2.0, delta=1e-5, sensitivity=1.0) < one
    assert analytic_gaussian_sigma(epsilon=1.0, delta=1e-3, sensitivity=1.0) < one


def test_for_vector_uses_sqrt_d_and_describes_itself() -> None:
    mechanism = AnalyticGaussianMechanism.for_vector(epsilon=1.0, delta=1e-5, dimension=4)
    assert mechanism.sensitivity == 2.0
    assert mechanism.sigma == pytest.approx(2 * analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0))
    assert mechanism.noise_variance == pytest.approx(mechanism.sigma**2)
    assert mechanism.describe() == {
        "mechanism": "analytic_gaussian",
        "epsilon": 1.0,
        "delta": 1e-5,
        "sensitivity": 2.0,
        "noise_scale": mechanism.sigma,
        "epsilon_per_coordinate": None,
    }


def test_release_law_clipping_masses_and_grid() -> None:
    # Prepare: n values at ½ with Δ2 = √n; ε chosen so σ is moderate.
    n = 20_000
    mechanism = AnalyticGaussianMechanism.for_vector(epsilon=EPSILON_MAX, delta=1e-5, dimension=n)
    sigma = mechanism.sigma
    assert 0.1 < sigma < 10
    # Execute
    out = np.array(list(mechanism.privatize({f"c{k}": 0.5 for k in range(n)}, make_rng(12)).values()))
    # Assert: in [0, 1] on the release grid, with P(out = 1) = P(out = 0) = 1 − Φ(0.5/σ).
    assert out.min() >= 0 and out.max() <= 1
    assert np.all(out / RELEASE_GRID == np.round(out / RELEASE_GRID))
    p = 1 - _phi(0.5 / sigma)
    se = math.sqrt(p * (1 - p) / n)
    assert abs((out == 1.0).mean() - p) < 5 * se
    assert abs((out == 0.0).mean() - p) < 5 * se
    inner = out[(out > 0) & (out < 1)]
    assert abs(inner.mean() - 0.5) < 5 * 0.5 / math.sqrt(inner.size)


def test_privatize_refuses_more_values_than_the_sensitivity_covers() -> None:
    mechanism = AnalyticGaussianMechanism.for_vector(epsilon=1.0, delta=1e-5, dimension=2)
    mechanism.privatize({"a": 0.1, "b": 0.2}, make_rng(0))
    with pytest.raises(ValueError):
        mechanism.privatize({"a": 0.1, "b": 0.2, "c": 0.3}, make_rng(0))
    with pytest.raises(ValueError):
        mechanism.privatize({"a": math.inf}, make_rng(0))


def test_same_seed_same_release() -> None:
    mechanism = AnalyticGaussianMechanism(epsilon=3.0, delta=1e-6, sensitivity=1.0)
    assert mechanism.privatize({"a": 0.4}, make_rng(13)) == mechanism.privatize({"a": 0.4}, make_rng(13))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilon": 0.0, "delta": 1e-5, "sensitivity": 1.0},
        {"epsilon": math.inf, "delta": 1e-5, "sensitivity": 1.0},
        {"epsilon": 1.0, "delta": 0.0, "sensitivity": 1.0},
        {"epsilon": 1.0, "delta": 1.0, "sensitivity": 1.0},
        {"epsilon": 1.0, "delta": math.nan, "sensitivity": 1.0},
        {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 0.0},
        {"epsilon": 1.0, "delta": 1e-5, "sensitivity": -2.0},
    ],
)
def test_invalid_parameters_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        AnalyticGaussianMechanism(**kwargs)


def test_for_vector_refuses_bad_dimension() -> None:
    for dimension in (0, 2.0, True):
        with pytest.raises(ValueError):
            AnalyticGaussianMechanism.for_vector(epsilon=1.0, delta=1e-5, dimension=dimension)
