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

from privacy.likelihood import ClippedAdditiveKernel, GaussianNoise, LikelihoodKernel
from privacy.mechanisms import Mechanism, ReleaseCost, described_number
from privacy.ranges import DIMENSION_MAX, Epsilon, check_delta, check_dimension
from privacy.sampling import RELEASE_GRID

__all__ = ["AnalyticGaussianMechanism", "analytic_gaussian_sigma", "classical_gaussian_sigma", "gaussian_delta"]


_MAX_BRACKET_STEPS = 2_100  # doublings or halvings of σ: more than the whole exponent range of a double
_MAX_BISECTIONS = 200  # each halves log(hi/lo) from log 2; 1e-12 needs ~40, float resolution ~60


def _check_sensitivity(sensitivity: float) -> None:
    if isinstance(sensitivity, bool) or not (
        isinstance(sensitivity, int | float) and math.isfinite(sensitivity) and 0 < sensitivity <= DIMENSION_MAX
    ):
        raise ValueError(f"sensitivity must be a number in (0, {DIMENSION_MAX}], got {sensitivity!r}")


def _log_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    a = sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    log_a, log_b = float(log_ndtr(a)), float(log_ndtr(b))
    gap = epsilon + log_b - log_a  # log(e^ε Φ(b) / Φ(a)) < 0
    if math.isnan(gap):  # cannot happen inside the checked ranges; never let a NaN steer a loop
        raise ValueError(f"δ(σ) is not computable at epsilon={epsilon}, sigma={sigma}, sensitivity={sensitivity}")
    if gap >= 0:  # only by round-off, when δ(σ) underflows relative to Φ(a)
        return -math.inf
    return log_a + math.log(-math.expm1(gap))


def gaussian_delta(*, epsilon: Epsilon, sigma: float, sensitivity: float) -> float:
    """The exact δ(ε) of the Gaussian mechanism with noise σ and L2 sensitivity Δ."""
    if isinstance(sigma, bool) or not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    epsilon = Epsilon(epsilon)
    _check_sensitivity(sensitivity)
    return math.exp(_log_delta(epsilon, sigma, sensitivity))


def analytic_gaussian_sigma(*, epsilon: Epsilon, delta: float, sensitivity: float, rel_tol: float = 1e-12) -> float:
    """The smallest σ (within ``rel_tol``, rounded up) with δ(σ) ≤ δ.

    Total for ε in [EPSILON_MIN, EPSILON_MAX], δ in [DELTA_MIN, DELTA_MAX] and 0 < Δ ≤ DIMENSION_MAX:
    σ/Δ then lies within a factor 2^13 of 1, so the bracket takes a few dozen steps and the
    bisection at most ``_MAX_BISECTIONS``. (At ε = 1e308, before the ranges existed, δ(σ) was NaN
    everywhere and the bracketing loop never ended.)
    """
    epsilon = Epsilon(epsilon)
    check_delta(delta)
    _check_sensitivity(sensitivity)
    if not (isinstance(rel_tol, int | float) and 0 < rel_tol < 1):
        raise ValueError(f"rel_tol must lie in (0, 1), got {rel_tol!r}")
    log_target = math.log(delta)

    def ok(sigma: float) -> bool:
        return _log_delta(epsilon, sigma, sensitivity) <= log_target

    hi = float(sensitivity)
    for _ in range(_MAX_BRACKET_STEPS):
        if ok(hi):
            break
        hi *= 2
    else:
        raise ValueError(f"no σ up to {hi:g} reaches delta={delta} at epsilon={epsilon}")
    lo = hi / 2
    for _ in range(_MAX_BRACKET_STEPS):
        if not ok(lo):
            break
        hi, lo = lo, lo / 2
    else:
        raise ValueError(f"every σ down to {lo:g} reaches delta={delta} at epsilon={epsilon}")
    for _ in range(_MAX_BISECTIONS):  # invariant: not ok(lo), ok(hi)
        if hi / lo - 1 <= rel_tol:
            break
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:  # adjacent doubles: as close as floating point gets
            break
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def classical_gaussian_sigma(*, epsilon: Epsilon, delta: float, sensitivity: float) -> float:
    """Dwork & Roth's σ = Δ·√(2 ln(1.25/δ))/ε (valid only for ε < 1); for comparison."""
    epsilon = Epsilon(epsilon)
    check_delta(delta)
    _check_sensitivity(sensitivity)
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
        check_dimension(dimension)
        return cls(epsilon=epsilon, delta=delta, sensitivity=math.sqrt(dimension))

    @classmethod
    def for_request(cls, *, epsilon: Epsilon, delta: float, dimension: int) -> AnalyticGaussianMechanism:
        check_delta(delta)  # before the σ search, so a bad δ is reported as one
        return cls.for_vector(epsilon=epsilon, delta=delta, dimension=dimension)

    @classmethod
    def from_description(cls, description: Mapping[str, object]) -> AnalyticGaussianMechanism:
        return cls(
            epsilon=described_number(description, "epsilon"), delta=described_number(description, "delta"),
            sensitivity=described_number(description, "sensitivity"),
        )

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

    def charge(self) -> ReleaseCost:
        # σ/Δ₂ goes with (ε, δ) so that an RDP accountant can compose Gaussian releases tightly.
        return ReleaseCost(
            epsilon=float(self.epsilon), delta=float(self.delta), mechanism=self.name,
            sigma_over_sensitivity=self.sigma / self.sensitivity,
        )

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # As Laplace with N(0, σ² + τ²). The input clamp is ignored with τ > 0 (an approximation of order τ near
        # the ends, negligible when τ ≪ σ), and the 2^-20 release rounding is treated as a density.
        return ClippedAdditiveKernel(GaussianNoise(math.hypot(self.sigma, entity_error_sd)), self.name)

    @property
    def noise_sd(self) -> float:
        return self.sigma
