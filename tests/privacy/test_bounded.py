"""Duchi, piecewise and hybrid LDP mechanisms: range, unbiasedness, closed-form variance and the e^ε ratio.

Statistical checks use fixed seeds and tolerances of 5 standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from privacy.bounded import (
    HYBRID_THRESHOLD,
    BoundedMechanism,
    DuchiMechanism,
    DuchiRandomizer,
    HybridMechanism,
    HybridRandomizer,
    PiecewiseMechanism,
    PiecewiseRandomizer,
    ScalarRandomizer,
)
from privacy.mechanisms import make_rng
from privacy.sampling import RELEASE_GRID

RANDOMIZERS = [DuchiRandomizer, PiecewiseRandomizer, HybridRandomizer]
INPUTS = [-1.0, -0.4, 0.0, 0.7, 1.0]
N = 50_000


def _draws(randomizer: ScalarRandomizer, t: float, n: int = N, seed: int = 0) -> np.ndarray:
    return randomizer.sample(np.full(n, t), make_rng(seed))


@pytest.mark.parametrize("cls", RANDOMIZERS)
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_outputs_stay_within_the_bound(cls: type[ScalarRandomizer], epsilon: float) -> None:
    randomizer = cls(epsilon=epsilon)
    for seed, t in enumerate([-1.0, 0.0, 1.0]):
        out = _draws(randomizer, t, n=20_000, seed=seed)
        assert np.all(np.abs(out) <= randomizer.bound + RELEASE_GRID)
        if cls is DuchiRandomizer or (cls is HybridRandomizer and randomizer.alpha == 0):
            assert set(np.unique(np.abs(out))) == {randomizer.bound}


@pytest.mark.parametrize("cls", RANDOMIZERS)
@pytest.mark.parametrize("t", INPUTS)
def test_unbiased_with_closed_form_variance(cls: type[ScalarRandomizer], t: float) -> None:
    # Prepare: ε = 1.5 (the hybrid mixes PM and Duchi there).
    randomizer = cls(epsilon=1.5)
    # Execute
    out = _draws(randomizer, t, seed=int(10 * t) + 20)
    # Assert: mean within 5 SE of t; variance within 5 SE (from the 4th central moment) of the closed form.
    variance = float(randomizer.variance(t))
    assert abs(out.mean() - t) < 5 * math.sqrt(variance / N)
    m4 = np.mean((out - out.mean()) ** 4)
    assert abs(out.var() - variance) < 5 * math.sqrt((m4 - variance**2) / N)


def test_duchi_probabilities_have_ratio_exactly_e_to_epsilon() -> None:
    for epsilon in (0.1, 1.0, 5.0):
        duchi = DuchiRandomizer(epsilon=epsilon)
        p_up, p_down = duchi.probability_positive(1.0), duchi.probability_positive(-1.0)
        assert p_up / p_down == pytest.approx(math.exp(epsilon), rel=1e-12)
        assert (1 - p_down) / (1 - p_up) == pytest.approx(math.exp(epsilon), rel=1e-12)
        assert p_up + p_down == pytest.approx(1.0)


def test_duchi_empirical_ratio() -> None:
    duchi, n = DuchiRandomizer(epsilon=1.0), 100_000
    up_hi = (_draws(duchi, 1.0, n, seed=1) > 0).sum()
    up_lo = (_draws(duchi, -1.0, n, seed=2) > 0).sum()
    tolerance = 5 * math.sqrt(1 / up_hi + 1 / up_lo)
    assert abs(math.log(up_hi / up_lo) - 1.0) < tolerance


def _bin_log_ratios(a: np.ndarray, b: np.ndarray, bound: float, bins: int = 40, min_count: int = 500):
    """log(count_a/count_b) per common bin with enough mass in both, and its 5-SE tolerance."""
    edges = np.linspace(-bound - RELEASE_GRID, bound + RELEASE_GRID, bins + 1)
    ca, _ = np.histogram(a, edges)
    cb, _ = np.histogram(b, edges)
    keep = (ca >= min_count) & (cb >= min_count)
    assert keep.sum() >= bins // 2
    ca, cb = ca[keep].astype(float), cb[keep].astype(float)
    return np.log(ca / cb), 5 * np.sqrt(1 / ca + 1 / cb)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_piecewise_density_ratio_is_at_most_e_to_epsilon_and_tight(epsilon: float) -> None:
    pm, n = PiecewiseRandomizer(epsilon=epsilon), 200_000
    a, b = _draws(pm, 1.0, n, seed=3), _draws(pm, -1.0, n, seed=4)
    for log_ratio, tolerance in (_bin_log_ratios(a, b, pm.bound), _bin_log_ratios(b, a, pm.bound)):
        assert np.all(log_ratio <= epsilon + tolerance)
        # Tight: bins inside the high-density piece reach e^ε.
        assert np.max(log_ratio + tolerance) >= epsilon


def test_piecewise_high_density_piece() -> None:
    pm = PiecewiseRandomizer(epsilon=1.0)
    c = pm.bound
    # l(−1) = −C, r(1) = C, and the piece always has length C − 1.
    assert pm.interval(-1.0)[0] == pytest.approx(-c) and pm.interval(1.0)[1] == pytest.approx(c)
    left, right = pm.interval(0.3)
    assert right - left == pytest.approx(c - 1)
    out = _draws(pm, 0.3, 100_000, seed=5)
    inside = ((out >= left) & (out <= right)).mean()
    assert abs(inside - pm.p_center) < 5 * math.sqrt(pm.p_center * (1 - pm.p_center) / out.size)


def test_hybrid_density_ratio_on_atoms_and_continuous_part() -> None:
    epsilon, n = 2.0, 200_000
    hm = HybridRandomizer(epsilon=epsilon)
    a, b = _draws(hm, 1.0, n, seed=6), _draws(hm, -1.0, n, seed=7)
    c_duchi = hm.duchi.bound
    # Duchi's atoms at ±C_D, compared exactly (PM's rounded outputs never hit them).
    for atom in (c_duchi, -c_duchi):
        ca, cb = (a == atom).sum(), (b == atom).sum()
        assert abs(math.log(ca / cb)) <= epsilon + 5 * math.sqrt(1 / ca + 1 / cb)
    expected_atoms = (1 - hm.alpha) * n
    assert abs(np.isin(a, [c_duchi, -c_duchi]).sum() - expected_atoms) < 5 * math.sqrt(n * hm.alpha * (1 - hm.alpha))
    # The continuous (PM) part.
    a_pm, b_pm = a[np.abs(a) != c_duchi], b[np.abs(b) != c_duchi]
    for log_ratio, tolerance in (_bin_log_ratios(a_pm, b_pm, hm.bound), _bin_log_ratios(b_pm, a_pm, hm.bound)):
        assert np.all(np.abs(log_ratio) <= epsilon + tolerance)


def test_hybrid_threshold_and_mixing_weight() -> None:
    def gap(eps: float) -> float:  # PM's minus Duchi's variance at t = 0
        return PiecewiseRandomizer(epsilon=eps).variance(0.0) - DuchiRandomizer(epsilon=eps).variance(0.0)

    assert HYBRID_THRESHOLD == pytest.approx(brentq(gap, 0.1, 2.0), rel=1e-9)
    assert HYBRID_THRESHOLD == pytest.approx(0.61, abs=0.005)
    assert HybridRandomizer(epsilon=0.5).alpha == 0.0
    assert HybridRandomizer(epsilon=0.5).bound == DuchiRandomizer(epsilon=0.5).bound
    assert HybridRandomizer(epsilon=2.0).alpha == pytest.approx(1 - math.exp(-1.0))
    for eps in (0.2, 0.7, 1.5, 4.0):
        worst = HybridRandomizer(epsilon=eps).worst_case_variance()
        duchi, pm = DuchiRandomizer(epsilon=eps), PiecewiseRandomizer(epsilon=eps)
        assert worst <= min(duchi.worst_case_variance(), pm.worst_case_variance()) + 1e-12


def test_closed_form_variances() -> None:
    eps, t = 1.2, 0.5
    e, s = math.exp(eps), math.exp(eps / 2)
    assert DuchiRandomizer(epsilon=eps).variance(t) == pytest.approx(((e + 1) / (e - 1)) ** 2 - t**2)
    assert PiecewiseRandomizer(epsilon=eps).variance(t) == pytest.approx(t**2 / (s - 1) + (s + 3) / (3 * (s - 1) ** 2))


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism, HybridMechanism])
def test_the_unchecked_variance_of_one_value_is_the_checked_one_exactly(cls: type[BoundedMechanism]) -> None:
    # variance_at is the hot path of the anchored release's post-processing: the same arithmetic, bit for bit
    for epsilon, dimension in ((32.0, 15), (0.4, 4), (1000.0, 1)):
        mechanism = cls(epsilon=epsilon, dimension=dimension)
        for x in (0.0, 0.13, 0.5, 0.77, 1.0):
            assert mechanism.variance_at(x) == float(mechanism.variance(x)), (epsilon, dimension, x)


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism, HybridMechanism])
def test_mechanism_splits_epsilon_and_describes_itself(cls: type[BoundedMechanism]) -> None:
    mechanism = cls(epsilon=2.0, dimension=4)
    info = mechanism.describe()
    assert info["mechanism"] == mechanism.name == {DuchiMechanism: "duchi", PiecewiseMechanism: "piecewise",
                                                   HybridMechanism: "hybrid"}[cls]
    assert info["epsilon"] == 2.0 and info["epsilon_per_coordinate"] == 0.5 and info["dimension"] == 4
    assert mechanism.randomizer.epsilon == 0.5
    assert info["unbiased"] is True and info["clip_output"] is False
    low, high = info["output_range"]
    assert low < 0 and high > 1
    out = mechanism.privatize({"a": 0.0, "b": 0.5, "c": 1.0}, make_rng(8))  # fewer than dimension is fine
    assert set(out) == {"a", "b", "c"}
    assert all(low - RELEASE_GRID <= v <= high + RELEASE_GRID for v in out.values())
    with pytest.raises(ValueError):
        mechanism.privatize({k: 0.5 for k in "abcde"}, make_rng(8))
    with pytest.raises(ValueError):
        mechanism.privatize({"a": math.nan}, make_rng(8))


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism, HybridMechanism])
@pytest.mark.parametrize("x", [0.0, 0.3, 1.0])
def test_mechanism_is_unbiased_in_the_unit_interval(cls: type[BoundedMechanism], x: float) -> None:
    # Prepare: n concepts at 1.0 each (dimension n, ε = n): one unbiased report per concept.
    n = 20_000
    mechanism = cls(epsilon=float(n), dimension=n)
    # Execute
    out = np.array(list(mechanism.privatize({f"c{k}": x for k in range(n)}, make_rng(9)).values()))
    # Assert
    assert abs(out.mean() - x) < 5 * math.sqrt(float(mechanism.variance(x)) / n)
    assert float(mechanism.variance(x)) == pytest.approx(float(mechanism.randomizer.variance(2 * x - 1)) / 4)


def test_clip_output_keeps_unit_interval_but_biases_the_mean() -> None:
    n = 20_000
    mechanism = DuchiMechanism(epsilon=float(n), dimension=n, clip_output=True)
    out = np.array(list(mechanism.privatize({f"c{k}": 0.0 for k in range(n)}, make_rng(10)).values()))
    assert out.min() >= 0 and out.max() <= 1
    assert out.mean() > 0.1  # clipping pulls the estimate of 0 upwards
    assert mechanism.describe()["unbiased"] is False and mechanism.output_range == (0.0, 1.0)


def test_same_seed_same_release() -> None:
    mechanism = PiecewiseMechanism(epsilon=3.0, dimension=2)
    values = {"a": 0.2, "b": 0.9}
    assert mechanism.privatize(values, make_rng(11)) == mechanism.privatize(values, make_rng(11))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilon": 0.0, "dimension": 1},
        {"epsilon": -1.0, "dimension": 1},
        {"epsilon": math.inf, "dimension": 1},
        {"epsilon": math.nan, "dimension": 1},
        {"epsilon": 1.0, "dimension": 0},
        {"epsilon": 1.0, "dimension": 1.5},
        {"epsilon": 1.0, "dimension": True},
        {"epsilon": 1.0, "dimension": 1, "clip_output": "yes"},
        {"epsilon": 1000.5, "dimension": 1},  # ε per concept above EPSILON_MAX
        {"epsilon": 1e-3, "dimension": 2_000_000},  # above DIMENSION_MAX
        {"epsilon": 1e-300, "dimension": 1},  # ε per concept below COORDINATE_EPSILON_MIN
    ],
)
def test_invalid_parameters_are_refused(kwargs: dict) -> None:
    for cls in (DuchiMechanism, PiecewiseMechanism, HybridMechanism):
        with pytest.raises(ValueError):
            cls(**kwargs)


def test_randomizers_refuse_inputs_outside_the_domain() -> None:
    with pytest.raises(ValueError):
        DuchiRandomizer(epsilon=1.0).sample(np.array([1.5]), make_rng(0))
    with pytest.raises(ValueError):
        PiecewiseRandomizer(epsilon=1.0).variance(-2.0)
    with pytest.raises(ValueError):
        DuchiMechanism(epsilon=1.0, dimension=1).variance(1.2)
