"""The analytic Gaussian mechanism (Balle & Wang, ICML 2018) for a vector of values in [0, 1].

Adding N(0, σ²) to each coordinate of a query with L2 sensitivity Δ is (ε, δ)-DP iff
(Balle & Wang, Theorem 8)

    δ(σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε·Φ(−Δ/(2σ) − εσ/Δ) ≤ δ.

δ(σ) decreases in σ, so the smallest admissible σ is found by bisection on log σ. We evaluate
δ(σ) as Φ(a)·(−expm1(ε + log Φ(b) − log Φ(a))) with ``scipy.special.log_ndtr``, which neither
overflows in e^ε nor loses the small difference of two nearly equal terms. Unlike the
classical σ = Δ·√(2 ln(1.25/δ))/ε, this holds for every ε > 0 and is never larger than needed.

A vector of d mastery values in [0, 1] changes by at most 1 per coordinate when the student
changes, so its L2 sensitivity is √d (:meth:`AnalyticGaussianMechanism.for_vector`). The whole
vector is (ε, δ)-DP at once: there is no per-coordinate split of ε, since the L2 sensitivity
already accounts for all d coordinates.

Releases are N(0, σ²)-noised values rounded to the fixed grid RELEASE_GRID = 2^-20 (so that the
low bits of a floating-point Gaussian draw do not carry the input; a hardening, see
:func:`privacy.sampling.stochastic_round`) and then clipped to [0, 1] (post-processing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.special import log_ndtr

from privacy.mechanisms import Mechanism
from privacy.sampling import RELEASE_GRID

__all__ = ["AnalyticGaussianMechanism", "analytic_gaussian_sigma", "classical_gaussian_sigma", "gaussian_delta"]


def _check(epsilon: float, delta: float, sensitivity: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity}")


def _log_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    a = sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    log_a, log_b = float(log_ndtr(a)), float(log_ndtr(b))
    gap = epsilon + log_b - log_a  # log(e^ε Φ(b) / Φ(a)) < 0
    if gap >= 0:  # only by round-off, when δ(σ) underflows relative to Φ(a)
        return -math.inf
    return log_a + math.log(-math.expm1(gap))


def gaussian_delta(*, epsilon: float, sigma: float, sensitivity: float) -> float:
    """The exact δ(ε) of the Gaussian mechanism with noise σ and L2 sensitivity Δ."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma}")
    _check(epsilon, 0.5, sensitivity)
    return math.exp(_log_delta(epsilon, sigma, sensitivity))


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float, rel_tol: float = 1e-12) -> float:
    """The smallest σ (within ``rel_tol``, rounded up) with δ(σ) ≤ δ."""
    _check(epsilon, delta, sensitivity)
    log_target = math.log(delta)

    def ok(sigma: float) -> bool:
        return _log_delta(epsilon, sigma, sensitivity) <= log_target

    hi = sensitivity
    while not ok(hi):
        hi *= 2
    lo = hi / 2
    while ok(lo):
        hi, lo = lo, lo / 2
    while hi / lo - 1 > rel_tol:  # invariant: not ok(lo), ok(hi)
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def classical_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """Dwork & Roth's σ = Δ·√(2 ln(1.25/δ))/ε (valid only for ε < 1); for comparison."""
    _check(epsilon, delta, sensitivity)
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


@dataclass(frozen=True, kw_only=True)
class AnalyticGaussianMechanism(Mechanism):
    """(ε, δ)-DP release of values in [0, 1] with N(0, σ²) noise per value, clipped to [0, 1].

    ``sensitivity`` is the L2 sensitivity Δ2 of the whole released vector: √d for d values in
    [0, 1] (use :meth:`for_vector`). :meth:`privatize` refuses more than Δ2² values.
    """

    epsilon: float
    delta: float
    sensitivity: float
    name: str = field(default="analytic_gaussian", init=False)
    sigma: float = field(init=False)

    def __post_init__(self) -> None:
        sigma = analytic_gaussian_sigma(epsilon=self.epsilon, delta=self.delta, sensitivity=self.sensitivity)
        object.__setattr__(self, "sigma", sigma)

    @classmethod
    def for_vector(cls, *, epsilon: float, delta: float, dimension: int) -> AnalyticGaussianMechanism:
        """The mechanism for up to ``dimension`` values in [0, 1]: Δ2 = √dimension."""
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ValueError(f"dimension must be an integer >= 1, got {dimension!r}")
        return cls(epsilon=epsilon, delta=delta, sensitivity=math.sqrt(dimension))

    @property
    def noise_variance(self) -> float:
        """σ², the variance of the noise added to each value (before rounding and clipping)."""
        return self.sigma**2

    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        keys = list(values)
        if len(keys) > self.sensitivity**2 * (1 + 1e-12):
            raise ValueError(f"{len(keys)} values in [0, 1] exceed L2 sensitivity {self.sensitivity}")
        x = np.array([values[k] for k in keys], dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("values must be finite")
        noisy = np.clip(x, 0.0, 1.0) + rng.normal(0.0, self.sigma, size=len(keys))
        released = np.clip(np.rint(noisy / RELEASE_GRID) * RELEASE_GRID, 0.0, 1.0)
        return {k: float(v) for k, v in zip(keys, released)}

    def describe(self) -> dict[str, object]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sensitivity": self.sensitivity,  # L2
            "noise_scale": self.sigma,
            "epsilon_per_coordinate": None,  # no split: the L2 sensitivity covers the whole vector
        }
