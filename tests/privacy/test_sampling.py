"""Floating-point-safe Laplace: full-precision uniforms, snapping, and the secure mechanism (fixed seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privacy.mechanisms import make_rng
from privacy.sampling import (
    RELEASE_GRID,
    ROUNDOFF,
    SecureLaplaceMechanism,
    generator_random_bytes,
    laplace_noise,
    os_random_bytes,
    power_of_two_at_least,
    snap_laplace,
    snapping_epsilon,
    stochastic_round,
    uniform_full_precision,
)


def _scripted_bytes(words: list[int]):
    """A random_bytes source that replays 64-bit words, then repeats the last one."""
    stream = list(words)

    def random_bytes(n: int) -> bytes:
        out = []
        for _ in range(n // 8):
            out.append(stream.pop(0) if len(stream) > 1 else stream[0])
        return np.array(out, dtype="<u8").tobytes()

    return random_bytes


def _binomial_close(observed: float, p: float, n: int, z: float = 5.0) -> bool:
    return abs(observed - p) < z * math.sqrt(p * (1 - p) / n)


def test_uniform_known_answers_from_scripted_bits() -> None:
    # Mantissa word 0; exponent chunk with its top bit set → no leading zeros → U = 0.5.
    assert uniform_full_precision(1, _scripted_bytes([0, 1 << 63]))[0] == 0.5
    # Exponent chunk (53 bits) equal to 1 → 52 leading zeros → U = 2^-53.
    assert uniform_full_precision(1, _scripted_bytes([0, 1 << 11]))[0] == 2.0**-53
    # All mantissa bits set, one zero chunk then a top bit → 53 zeros → U = (2 − 2^-52)·2^-54.
    u = uniform_full_precision(1, _scripted_bytes([(1 << 52) - 1, 0, 1 << 63]))[0]
    assert u == (2 - 2.0**-52) * 2.0**-54


def test_uniform_terminates_and_stays_positive_on_an_all_zero_source() -> None:
    u = uniform_full_precision(3, lambda n: bytes(n))
    assert np.all(u > 0) and np.all(u >= 2.0**-1022) and np.all(u < 2.0**-1021)


def test_uniform_law_and_full_precision_low_bits() -> None:
    n = 200_000
    u = uniform_full_precision(n, generator_random_bytes(make_rng(1)))
    assert u.min() > 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    for k in range(1, 7):
        assert _binomial_close((u < 2.0**-k).mean(), 2.0**-k, n)
    # Small draws keep 52 random mantissa bits: they are (almost) never multiples of 2^-53,
    # whereas numpy's rng.random() only returns multiples of 2^-53.
    small = u[u < 2.0**-8]
    assert small.size > 500
    assert np.mean(small * 2.0**53 != np.floor(small * 2.0**53)) > 0.95
    naive = make_rng(1).random(n)
    assert np.all(naive * 2.0**53 == np.floor(naive * 2.0**53))


@pytest.mark.parametrize("scale", [0.7, 3.0])
def test_laplace_noise_matches_laplace_law(scale: float) -> None:
    noise = laplace_noise(20_000, scale=scale, random_bytes=generator_random_bytes(make_rng(2)))
    assert stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue > 0.001
    assert noise.var() == pytest.approx(2 * scale**2, rel=0.06)
    assert _binomial_close((noise > 0).mean(), 0.5, noise.size)


def test_os_randomness_is_usable() -> None:
    noise = laplace_noise(2_000, scale=1.0, random_bytes=os_random_bytes)
    assert np.all(np.isfinite(noise)) and np.unique(noise).size == noise.size


@pytest.mark.parametrize("x,expected", [(1.0, 1.0), (3.0, 4.0), (0.3, 0.5), (2.0**-30, 2.0**-30), (5.0000001, 8.0)])
def test_power_of_two_at_least(x: float, expected: float) -> None:
    assert power_of_two_at_least(x) == expected


@pytest.mark.parametrize("x", [0.0, -1.0, math.inf, math.nan])
def test_power_of_two_refuses_bad_input(x: float) -> None:
    with pytest.raises(ValueError):
        power_of_two_at_least(x)


def test_snapping_epsilon_is_mironovs_bound() -> None:
    assert snapping_epsilon(scale=2.0, bound=8.0) == (1 + 12 * 8.0 * ROUNDOFF) / 2.0 + 2 * ROUNDOFF
    assert 0.5 < snapping_epsilon(scale=2.0, bound=8.0) < 0.5 * (1 + 1e-12)
    # Mironov's simplified form 1/λ + 2^-49·B/λ is an upper bound of it when λ < B.
    assert snapping_epsilon(scale=2.0, bound=8.0) <= 1 / 2.0 + 2.0**-49 * 8.0 / 2.0
    for bound in (2.0, 1.0, 2.0**47 * 2.0, math.inf):
        with pytest.raises(ValueError):
            snapping_epsilon(scale=2.0, bound=bound)


def test_snapped_outputs_are_multiples_of_lambda_within_bound() -> None:
    # Prepare: λ = 0.3 → Λ = 0.5, B = 2; inputs include values outside [−B, B] (clamped first).
    scale, bound, grid = 0.3, 2.0, 0.5
    x = np.tile([0.0, 0.4, -1.9, 5.0, -7.0], 8_000)
    # Execute
    y = snap_laplace(x, scale=scale, bound=bound, random_bytes=generator_random_bytes(make_rng(3)))
    # Assert: on the grid, inside [−B, B]; for x = 0, P(y = 0) = P(|L| < Λ/2) = 1 − e^{−0.25/0.3}.
    assert np.all(y / grid == np.round(y / grid))
    assert np.all(np.abs(y) <= bound)
    at_zero = y[x == 0.0]
    assert _binomial_close((at_zero == 0).mean(), 1 - math.exp(-0.25 / scale), at_zero.size)
    # x = 5 is clamped to B = 2 first, so y = B unless the noise is below −Λ/2.
    assert _binomial_close((y[x == 5.0] == bound).mean(), 1 - 0.5 * math.exp(-0.25 / scale), at_zero.size)


def test_secure_laplace_describe_and_effective_epsilon() -> None:
    mechanism = SecureLaplaceMechanism(epsilon=1.0, sensitivity=4.0)
    info = mechanism.describe()
    assert info["mechanism"] == "secure_laplace" == mechanism.name
    assert info["noise_scale"] == 4.0 and info["epsilon_per_coordinate"] == 0.25
    assert info["snapping_grid"] == 4.0 and info["snapping_bound"] == 8.0
    assert mechanism.effective_epsilon == pytest.approx(1.0 * (1 + 12 * 8.0 * ROUNDOFF) + 2 * ROUNDOFF * 4.0, rel=1e-15)
    assert 1.0 < mechanism.effective_epsilon < 1.0 + 1e-12


def test_secure_laplace_release_law_and_grid() -> None:
    # Prepare: Δ = n values with ε = n/0.3 → λ = 0.3 per concept, Λ = 0.5; every value 0.5 (centre).
    n = 20_000
    mechanism = SecureLaplaceMechanism(epsilon=n / 0.3, sensitivity=float(n), randomness="generator")
    values = {f"c{k}": 0.5 for k in range(n)}
    # Execute
    out = np.array(list(mechanism.privatize(values, make_rng(4)).values()))
    # Assert: outputs ½ + k·Λ clipped → {0, ½, 1} with the snapped Laplace probabilities.
    assert set(np.unique(out)) <= {0.0, 0.5, 1.0}
    assert _binomial_close((out == 0.5).mean(), 1 - math.exp(-0.25 / 0.3), n)
    assert _binomial_close((out == 1.0).mean(), 0.5 * math.exp(-0.25 / 0.3), n)
    assert _binomial_close((out == 0.0).mean(), 0.5 * math.exp(-0.25 / 0.3), n)


def test_secure_laplace_fine_grid_at_large_per_concept_epsilon() -> None:
    mechanism = SecureLaplaceMechanism(epsilon=40.0, sensitivity=2.0, randomness="generator")
    out = mechanism.privatize({"a": 0.3, "b": 0.9}, make_rng(5))
    assert mechanism.grid == 0.0625
    assert all(0 <= v <= 1 and ((v - 0.5) / 0.0625).is_integer() for v in out.values())


def test_secure_laplace_randomness_sources() -> None:
    values = {f"c{k}": 0.5 for k in range(200)}
    seeded = SecureLaplaceMechanism(epsilon=2000.0, sensitivity=200.0, randomness="generator")
    assert seeded.privatize(values, make_rng(6)) == seeded.privatize(values, make_rng(6))
    os_backed = SecureLaplaceMechanism(epsilon=2000.0, sensitivity=200.0)
    # The OS CSPRNG ignores the (identically seeded) numpy generator.
    assert os_backed.privatize(values, make_rng(6)) != os_backed.privatize(values, make_rng(6))


def test_secure_laplace_refuses_more_values_than_the_sensitivity_covers() -> None:
    mechanism = SecureLaplaceMechanism(epsilon=1.0, sensitivity=2.0)
    with pytest.raises(ValueError):
        mechanism.privatize({"a": 0.1, "b": 0.2, "c": 0.3}, make_rng(0))
    with pytest.raises(ValueError):
        mechanism.privatize({"a": math.nan}, make_rng(0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilon": 0.0, "sensitivity": 1.0},
        {"epsilon": -1.0, "sensitivity": 1.0},
        {"epsilon": math.inf, "sensitivity": 1.0},
        {"epsilon": 1.0, "sensitivity": 0.5},
        {"epsilon": 1.0, "sensitivity": math.nan},
        {"epsilon": 1.0, "sensitivity": 1.0, "randomness": "numpy"},
        {"epsilon": 1e30, "sensitivity": 1.0},  # λ so small that B = ½ exceeds 2^46·λ
    ],
)
def test_secure_laplace_invalid_parameters(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SecureLaplaceMechanism(**kwargs)


def test_stochastic_round_is_unbiased_and_on_grid() -> None:
    x = np.full(50_000, 0.3 * RELEASE_GRID)
    y = stochastic_round(x, grid=RELEASE_GRID, rng=make_rng(7))
    assert set(np.unique(y / RELEASE_GRID)) == {0.0, 1.0}
    assert _binomial_close((y > 0).mean(), 0.3, x.size)
    with pytest.raises(ValueError):
        stochastic_round(x, grid=0.3, rng=make_rng(7))
