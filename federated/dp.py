"""Client-level DP arithmetic on model updates (lists of numpy arrays): clip, noise, sample.

Pure functions with an injected ``np.random.Generator``. They exist, instead of reusing
Flower's ``flwr.common.differential_privacy``, for two reasons: Flower draws noise from the
global ``np.random`` (not reproducible, not injectable), and Flower's strategies sample a
*fixed-size* set of clients per round, whereas the privacy accountant's amplification
analysis assumes *Poisson* sampling (each client independently with probability q).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "add_gaussian_noise",
    "clip_update",
    "flatten",
    "l2_norm",
    "poisson_sample",
    "unflatten",
    "update_nbytes",
]

Update = Sequence[np.ndarray]


def l2_norm(update: Update) -> float:
    """L2 norm of the whole update, as if all arrays were one flat vector."""
    return float(np.sqrt(sum(float(np.sum(np.square(a, dtype=np.float64))) for a in update)))


def clip_update(update: Update, *, clip_norm: float) -> tuple[list[np.ndarray], float]:
    """Scale ``update`` to L2 norm at most ``clip_norm``; also return the pre-clip norm for logging.

    The pre-clip norms are what one tunes ``clip_norm`` from (a median of them is a common
    choice), so callers should log them every round.
    """
    if clip_norm <= 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    norm = l2_norm(update)
    scale = min(1.0, clip_norm / norm) if norm > 0 else 1.0
    return [np.asarray(a) * scale for a in update], norm


def add_gaussian_noise(
    update: Update, *, noise_multiplier: float, clip_norm: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Add N(0, (noise_multiplier * clip_norm)^2) to every coordinate of a *sum* of clipped updates.

    One clipped contribution changes the sum by at most ``clip_norm`` in L2, so this is the
    Gaussian mechanism with noise multiplier ``noise_multiplier``. Divide afterwards (by a
    fixed denominator) to get a noisy mean.
    """
    if noise_multiplier < 0 or clip_norm <= 0:
        raise ValueError(f"need noise_multiplier >= 0 and clip_norm > 0, got {noise_multiplier}, {clip_norm}")
    std = noise_multiplier * clip_norm
    return [np.asarray(a) + rng.normal(0.0, std, size=np.shape(a)).astype(np.asarray(a).dtype) for a in update]


def poisson_sample(n_clients: int, q: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of the clients sampled this round: each independently with probability ``q``.

    The number sampled is Binomial(n_clients, q) and may be zero; a DP round must still run
    (and release noise) then, or the sampling would leak through the round count.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    if n_clients < 0:
        raise ValueError(f"n_clients must be >= 0, got {n_clients}")
    return np.flatnonzero(rng.random(n_clients) < q)


def flatten(update: Update) -> np.ndarray:
    """All arrays as one float vector (in order)."""
    return np.concatenate([np.ravel(a) for a in update]) if len(update) else np.zeros(0)


def unflatten(vector: np.ndarray, like: Update) -> list[np.ndarray]:
    """Inverse of :func:`flatten`, using the shapes and dtypes of ``like``."""
    out, offset = [], 0
    for a in like:
        size = int(np.size(a))
        out.append(np.asarray(vector[offset:offset + size]).reshape(np.shape(a)).astype(np.asarray(a).dtype))
        offset += size
    if offset != len(vector):
        raise ValueError(f"vector has {len(vector)} entries, the shapes need {offset}")
    return out


def update_nbytes(update: Update) -> int:
    """Bytes to send ``update`` as float32 (what a round costs on the wire, per client)."""
    return 4 * sum(int(np.size(a)) for a in update)
