"""Clipping, noise and Poisson sampling on updates (lists of arrays), with seeded generators."""

from __future__ import annotations

import numpy as np
import pytest

from federated import add_gaussian_noise, clip_update, flatten, l2_norm, poisson_sample, unflatten, update_nbytes


def _update(rng: np.random.Generator, scale: float = 1.0) -> list[np.ndarray]:
    return [rng.normal(size=(3, 4)).astype(np.float32) * scale, rng.normal(size=5).astype(np.float32) * scale]


def test_l2_norm_is_the_norm_of_the_flattened_update() -> None:
    update = _update(np.random.default_rng(0))
    assert l2_norm(update) == pytest.approx(float(np.linalg.norm(flatten(update))), rel=1e-6)


@pytest.mark.parametrize("scale", [0.01, 1.0, 100.0])
def test_clip_caps_the_norm_keeps_direction_and_reports_pre_clip_norm(scale: float) -> None:
    # Prepare
    update = _update(np.random.default_rng(1), scale)
    norm = l2_norm(update)

    # Execute
    clipped, pre = clip_update(update, clip_norm=1.0)

    # Assert
    assert pre == pytest.approx(norm)
    assert l2_norm(clipped) == pytest.approx(min(norm, 1.0), rel=1e-5)
    cosine = flatten(clipped) @ flatten(update) / (l2_norm(clipped) * norm)
    assert cosine == pytest.approx(1.0, abs=1e-5)


def test_clipping_zero_update_is_zero() -> None:
    clipped, pre = clip_update([np.zeros(3)], clip_norm=1.0)
    assert pre == 0.0 and not np.any(clipped[0])


def test_noise_has_std_sigma_times_c_and_is_seeded() -> None:
    # Prepare
    zeros = [np.zeros((200, 250)), np.zeros(50_000)]

    # Execute
    noisy = add_gaussian_noise(zeros, noise_multiplier=1.5, clip_norm=2.0, rng=np.random.default_rng(0))
    again = add_gaussian_noise(zeros, noise_multiplier=1.5, clip_norm=2.0, rng=np.random.default_rng(0))

    # Assert: 100k draws, std 3 to within 1%
    values = flatten(noisy)
    assert values.std() == pytest.approx(3.0, rel=0.01)
    assert abs(values.mean()) < 0.05
    assert all(np.array_equal(a, b) for a, b in zip(noisy, again, strict=True))


def test_poisson_sampling_includes_each_client_independently_with_probability_q() -> None:
    # Prepare
    rng, n, q, rounds = np.random.default_rng(0), 50, 0.2, 4000

    # Execute
    counts = np.zeros(n)
    sizes = []
    for _ in range(rounds):
        chosen = poisson_sample(n, q, rng)
        counts[chosen] += 1
        sizes.append(len(chosen))

    # Assert: per-client inclusion ~ q, and the round size varies like Binomial(n, q) (not fixed)
    assert np.all(np.abs(counts / rounds - q) < 0.03)
    assert np.mean(sizes) == pytest.approx(n * q, rel=0.02)
    assert np.var(sizes) == pytest.approx(n * q * (1 - q), rel=0.1)
    assert 0 in {len(poisson_sample(3, 0.05, np.random.default_rng(s))) for s in range(20)}


def test_flatten_unflatten_round_trip_and_wire_size() -> None:
    update = _update(np.random.default_rng(2))
    back = unflatten(flatten(update), update)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(update, back, strict=True))
    assert update_nbytes(update) == 4 * 17


@pytest.mark.parametrize("call", [
    lambda: clip_update([np.ones(2)], clip_norm=0.0),
    lambda: poisson_sample(3, 1.5, np.random.default_rng(0)),
    lambda: add_gaussian_noise([np.ones(2)], noise_multiplier=-1.0, clip_norm=1.0, rng=np.random.default_rng(0)),
])
def test_invalid_arguments_raise(call) -> None:
    with pytest.raises(ValueError):
        call()
