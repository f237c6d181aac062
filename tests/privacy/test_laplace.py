"""The paper's Laplace LDP mechanism: scale, clipping and validation, checked statistically (fixed seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy import LaplaceMechanism, NoNoise, laplace_for_request, make_rng, sensitivity_for

N = 40_000


def _draws(mechanism: LaplaceMechanism, value: float, seed: int = 7) -> np.ndarray:
    rng = make_rng(seed)
    values = {f"c{k}": value for k in range(N)}
    return np.array(list(mechanism.privatize(values, rng).values()))


def test_noise_scale_matches_delta_over_epsilon() -> None:
    # Prepare: bounds wide enough that clipping never happens, so the raw Laplace law shows.
    mechanism = LaplaceMechanism(epsilon=2.0, sensitivity=4.0, lower=-1e9, upper=1e9)
    # Execute
    noise = _draws(mechanism, 0.0)
    # Assert: b = Δ/ε = 2; E|η| = b, Var η = 2b², mean 0 (tolerances ≈ 5 standard errors).
    b = 2.0
    assert mechanism.scale == pytest.approx(b)
    assert abs(noise.mean()) < 5 * math.sqrt(2) * b / math.sqrt(N)
    assert np.abs(noise).mean() == pytest.approx(b, rel=0.03)
    assert noise.var() == pytest.approx(2 * b * b, rel=0.05)


def test_clipping_keeps_outputs_in_unit_interval_with_the_laplace_point_masses() -> None:
    # Prepare: value 0.5, b = 1 → P(out = 0) = P(η ≤ −0.5) = ½·e^{−0.5}, same for 1.
    mechanism = LaplaceMechanism(epsilon=1.0, sensitivity=1.0)
    # Execute
    out = _draws(mechanism, 0.5, seed=11)
    # Assert
    assert out.min() >= 0.0 and out.max() <= 1.0
    expected = 0.5 * math.exp(-0.5)
    se = math.sqrt(expected * (1 - expected) / N)
    assert abs((out == 0.0).mean() - expected) < 5 * se
    assert abs((out == 1.0).mean() - expected) < 5 * se


def test_same_seed_same_noise_and_os_seeded_generators_differ() -> None:
    # Unclipped, so two different draws cannot both land on a bound and compare equal.
    mechanism = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, lower=-1e9, upper=1e9)
    values = {"a": 0.3, "b": 0.7}
    assert mechanism.privatize(values, make_rng(3)) == mechanism.privatize(values, make_rng(3))
    assert mechanism.privatize(values, make_rng()) != mechanism.privatize(values, make_rng())


@pytest.mark.parametrize("epsilon,sensitivity", [(0.0, 1.0), (-1.0, 1.0), (math.inf, 1.0), (1.0, 0.0), (1.0, math.nan)])
def test_invalid_parameters_are_refused(epsilon: float, sensitivity: float) -> None:
    with pytest.raises(ValueError):
        LaplaceMechanism(epsilon=epsilon, sensitivity=sensitivity)


def test_sensitivity_modes() -> None:
    assert sensitivity_for("paper", n_concepts_total=8, n_concepts_assessed=3) == 8.0
    assert sensitivity_for("assessed", n_concepts_total=8, n_concepts_assessed=3) == 3.0
    with pytest.raises(ValueError):
        sensitivity_for("other", n_concepts_total=8, n_concepts_assessed=3)  # type: ignore[arg-type]


def test_no_noise_when_the_request_asks_for_none() -> None:
    mechanism = laplace_for_request(epsilon=None, mode="paper", n_concepts_total=5, n_concepts_assessed=2)
    assert isinstance(mechanism, NoNoise)
    assert mechanism.privatize({"a": 0.42}, make_rng(0)) == {"a": 0.42}
    assert mechanism.describe()["epsilon"] is None


def test_request_mechanism_describes_its_public_parameters() -> None:
    mechanism = laplace_for_request(epsilon=2.0, mode="assessed", n_concepts_total=8, n_concepts_assessed=3)
    assert mechanism.describe() == {"mechanism": "laplace", "epsilon": 2.0, "sensitivity": 3.0, "noise_scale": 1.5}
