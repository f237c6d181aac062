"""Likelihood kernels, one per mechanism family: log p(report | x) of a report released by a mechanism.

Each mechanism builds its own kernel (``Mechanism.likelihood(entity_error_sd)``); the posterior
(:mod:`diagnosis.posterior`) only evaluates them. Nothing here reads a mechanism's name: a kernel
is given the noise law or the randomizer it models.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from privacy.likelihood.noise import Noise, expected_clamped_affine, prob_clip_in

if TYPE_CHECKING:  # the randomizers' module builds these kernels, so it is imported for types only
    from privacy.bounded import DuchiRandomizer, HybridRandomizer, PiecewiseRandomizer

__all__ = [
    "MATCH_TOL",
    "ClippedAdditiveKernel",
    "DegeneratePosteriorError",
    "DuchiKernel",
    "ExactKernel",
    "HybridKernel",
    "LikelihoodKernel",
    "PiecewiseKernel",
    "SnappedLaplaceKernel",
]

MATCH_TOL = 1e-9  # a report within this of a discrete output value is that value


class DegeneratePosteriorError(ValueError):
    """The reports have zero likelihood everywhere under the model (e.g. disagreeing noiseless reports)."""


def _matches(r: np.ndarray, value: float) -> np.ndarray:
    return np.abs(r - value) <= MATCH_TOL * max(1.0, abs(value))


def _check_unit(r: np.ndarray, name: str) -> None:
    if np.any((r < 0.0) | (r > 1.0)):
        bad = r[(r < 0.0) | (r > 1.0)][0]
        raise ValueError(f"{name} releases values in [0, 1]; got report {bad!r}")


class LikelihoodKernel(ABC):
    """log p(report | x) of one mechanism's reports about an entity's clean answer u = x + e, e ~ N(0, τ²)."""

    exact: bool = False  # the report *is* x (no noise, no entity error)

    @property
    @abstractmethod
    def scale(self) -> float:
        """The narrowest feature of the likelihood in x (sets the grid resolution)."""

    @abstractmethod
    def check(self, r: np.ndarray) -> None:
        """Raise ValueError for a report this mechanism cannot produce."""

    @abstractmethod
    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        """log p(r_i | x_g), shape (len(r), len(x))."""


class ExactKernel(LikelihoodKernel):
    """No noise and no entity error: the report is x itself (a point mass, not a density)."""

    exact = True

    @property
    def scale(self) -> float:
        return 0.0

    def check(self, r: np.ndarray) -> None:
        _check_unit(r, "a noiseless entity")

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise DegeneratePosteriorError("a noiseless report without entity error is a point mass, not a density")


@dataclass(frozen=True)
class ClippedAdditiveKernel(LikelihoodKernel):
    """r = clip(x + Z, 0, 1) with symmetric noise Z: density inside, point masses at 0 and 1."""

    noise: Noise
    name: str  # the mechanism's, for error messages

    @property
    def scale(self) -> float:
        return self.noise.scale

    def check(self, r: np.ndarray) -> None:
        _check_unit(r, self.name)

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = np.empty((r.size, x.size))
        low, high = r <= 0.0, r >= 1.0
        mid = ~(low | high)
        if np.any(low):
            out[low] = self.noise.logcdf(-x)  # P(x + Z ≤ 0)
        if np.any(high):
            out[high] = self.noise.logcdf(x - 1.0)  # P(x + Z ≥ 1) = P(Z ≤ x − 1)
        if np.any(mid):
            out[mid] = self.noise.logpdf(r[mid, None] - x[None, :])
        return out


@dataclass(frozen=True)
class SnappedLaplaceKernel(LikelihoodKernel):
    """Secure (snapping) Laplace: exact probabilities of the grid points ½ + kΛ, clipped to [0, 1]."""

    noise: Noise
    grid: float
    name: str  # the mechanism's, for error messages

    @property
    def scale(self) -> float:
        return self.noise.scale

    def _k(self, r: np.ndarray) -> np.ndarray:
        return np.rint((r - 0.5) / self.grid)

    def check(self, r: np.ndarray) -> None:
        _check_unit(r, self.name)
        inner = (r > 0.0) & (r < 1.0)
        off = inner & (np.abs(r - (0.5 + self._k(r) * self.grid)) > MATCH_TOL)
        if np.any(off):
            raise ValueError(f"{self.name} releases ½ + k·{self.grid} (clipped); got report {r[off][0]!r}")

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        g = self.grid
        k = self._k(r)
        lo = (k - 0.5) * g
        hi = (k + 0.5) * g
        k0 = math.floor(-0.5 / g)  # highest k released as 0
        k1 = math.ceil(0.5 / g)  # lowest k released as 1
        lo = np.where(r <= 0.0, -np.inf, np.where(r >= 1.0, (k1 - 0.5) * g, lo))
        hi = np.where(r >= 1.0, np.inf, np.where(r <= 0.0, (k0 + 0.5) * g, hi))
        c = (x - 0.5)[None, :]  # the centred input; z = c + noise
        return self.noise.log_interval(lo[:, None] - c, hi[:, None] - c)


@dataclass(frozen=True)
class DuchiKernel(LikelihoodKernel):
    randomizer: DuchiRandomizer
    tau: float
    clip_output: bool

    @property
    def scale(self) -> float:
        return math.inf

    def values(self) -> tuple[float, float]:
        """The released (minus, plus) values on the x scale."""
        if self.clip_output:
            return 0.0, 1.0
        c = self.randomizer.bound
        return float((-c + 1) / 2), float((c + 1) / 2)

    def check(self, r: np.ndarray) -> None:
        minus, plus = self.values()
        bad = ~(_matches(r, minus) | _matches(r, plus))
        if np.any(bad):
            raise ValueError(f"duchi releases {minus!r} or {plus!r}; got report {r[bad][0]!r}")

    def log_probabilities(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P(minus | x), log P(plus | x): P(±) = ((C − 1) + 2·E[clip(±…)])/(2C), both sums of positives."""
        c = self.randomizer.bound
        c_minus_1 = self.randomizer.bound_excess
        up = expected_clamped_affine(x, self.tau, 0.0, 1.0, 0.0, 1.0)  # E[clip(x + e, 0, 1)]
        down = expected_clamped_affine(1.0 - x, self.tau, 0.0, 1.0, 0.0, 1.0)  # 1 − E[clip(x + e, 0, 1)]
        with np.errstate(divide="ignore"):
            return np.log((c_minus_1 + 2 * down) / (2 * c)), np.log((c_minus_1 + 2 * up) / (2 * c))

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        _, plus = self.values()
        log_minus, log_plus = self.log_probabilities(x)
        return np.where(_matches(r, plus)[:, None], log_plus[None, :], log_minus[None, :])


@dataclass(frozen=True)
class PiecewiseKernel(LikelihoodKernel):
    """``release_grid``: the step releases are rounded to, which widens the support by one step."""

    randomizer: PiecewiseRandomizer
    tau: float
    clip_output: bool
    release_grid: float

    @property
    def scale(self) -> float:
        return math.inf

    @property
    def densities(self) -> tuple[float, float]:
        """(p_low, p_high) of the output on the t scale: p_high/p_low = e^ε."""
        return self.randomizer.densities

    def support(self) -> tuple[float, float]:
        if self.clip_output:
            return 0.0, 1.0
        c = self.randomizer.bound
        return (1 - c) / 2 - self.release_grid, (1 + c) / 2 + self.release_grid

    def check(self, r: np.ndarray) -> None:
        low, high = self.support()
        bad = (r < low) | (r > high)
        if np.any(bad):
            raise ValueError(f"piecewise releases values in [{low}, {high}]; got report {r[bad][0]!r}")

    def log_density(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        """log density of an unclipped report r (x scale) given x: 2·(p_low·(1 − P_in) + p_high·P_in)."""
        c = self.randomizer.bound
        p_low, p_high = self.densities
        v = (2 * r - 1)[:, None]
        # v ∈ [l(t), r(t)] with l = (C+1)u − C, r = (C+1)u − 1 ⇔ u ∈ [(v+1)/(C+1), (v+C)/(C+1)].
        p_in = prob_clip_in(x[None, :], self.tau, (v + 1) / (c + 1), (v + c) / (c + 1))
        return np.log(2 * (p_low * (1 - p_in) + p_high * p_in))

    def log_masses(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P(v ≤ −1 | x), log P(v ≥ 1 | x): the point masses at 0 and 1 when the output is clipped."""
        c = self.randomizer.bound
        p_low, p_high = self.densities
        # Overlap of [l(t), r(t)] with [−C, −1] is clamp(C − 1 − (C+1)u, 0, C − 1); with [1, C], clamp((C+1)u − 2, ...).
        below = expected_clamped_affine(x, self.tau, c - 1, -(c + 1), 0.0, c - 1)
        above = expected_clamped_affine(x, self.tau, -2.0, c + 1, 0.0, c - 1)
        with np.errstate(divide="ignore"):
            return (
                np.log(p_low * (c - 1 - below) + p_high * below),
                np.log(p_low * (c - 1 - above) + p_high * above),
            )

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = self.log_density(r, x)
        if self.clip_output:
            log_low, log_high = self.log_masses(x)
            out[r <= 0.0] = log_low
            out[r >= 1.0] = log_high
        return out


@dataclass(frozen=True)
class HybridKernel(LikelihoodKernel):
    randomizer: HybridRandomizer
    tau: float
    clip_output: bool
    release_grid: float  # of the piecewise part

    @property
    def scale(self) -> float:
        return math.inf

    @property
    def duchi(self) -> DuchiKernel:
        return DuchiKernel(self.randomizer.duchi, self.tau, self.clip_output)

    @property
    def piecewise(self) -> PiecewiseKernel:
        return PiecewiseKernel(self.randomizer.piecewise, self.tau, self.clip_output, self.release_grid)

    def _is_duchi(self, r: np.ndarray) -> np.ndarray:
        minus, plus = self.duchi.values()
        return _matches(r, minus) | _matches(r, plus)

    def check(self, r: np.ndarray) -> None:
        if self.randomizer.alpha == 0:
            self.duchi.check(r)
        else:
            low, high = self.piecewise.support()
            bad = ((r < low) | (r > high)) & ~self._is_duchi(r)
            if np.any(bad):
                raise ValueError(f"hybrid releases values in [{low}, {high}]; got report {r[bad][0]!r}")

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        alpha = self.randomizer.alpha
        if alpha == 0:
            return self.duchi.loglik(r, x)
        # 1 − α = e^{−ε/2} exactly; log1p(−α) would fail once α rounds to 1 (ε above ~75).
        log_a, log_1a = math.log(alpha), -self.randomizer.epsilon / 2
        pm = self.piecewise
        if self.clip_output:  # 0 and 1 are reached by both parts
            out = log_a + pm.log_density(r, x)
            d_minus, d_plus = self.duchi.log_probabilities(x)
            p_low, p_high = pm.log_masses(x)
            out[r <= 0.0] = np.logaddexp(log_a + p_low, log_1a + d_minus)
            out[r >= 1.0] = np.logaddexp(log_a + p_high, log_1a + d_plus)
            return out
        is_duchi = self._is_duchi(r)
        out = np.empty((r.size, x.size))
        if np.any(is_duchi):
            out[is_duchi] = log_1a + self.duchi.loglik(r[is_duchi], x)
        if np.any(~is_duchi):
            out[~is_duchi] = log_a + pm.log_density(r[~is_duchi], x)
        return out
