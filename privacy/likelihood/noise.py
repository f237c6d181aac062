"""Noise laws (symmetric about 0) and closed-form expectations of the clean answer clip(x + e, 0, 1).

The building blocks of the mechanisms' likelihoods (:mod:`privacy.likelihood.kernels`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr, ndtr

__all__ = [
    "GaussianNoise",
    "LaplaceNoise",
    "Noise",
    "NormalLaplaceNoise",
    "expected_clamped_affine",
    "laplace_with_error",
    "prob_clip_in",
]

_LOG_HALF = math.log(0.5)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


# --------------------------------------------------------------------------------------------
# Noise laws (symmetric about 0): log density and log CDF
# --------------------------------------------------------------------------------------------


def _log1mexp(a: np.ndarray) -> np.ndarray:
    """log(1 − e^a) for a ≤ 0, accurately."""
    a = np.minimum(a, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(a > -math.log(2), np.log(-np.expm1(a)), np.log1p(-np.exp(a)))


class Noise(ABC):
    scale: float  # the narrowest feature of the density (sets the grid resolution)

    @abstractmethod
    def logpdf(self, z: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def logcdf(self, z: np.ndarray) -> np.ndarray:
        """log P(Z ≤ z) for finite z."""

    def log_interval(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """log P(lo ≤ Z < hi); lo may be −inf, hi +inf (elementwise, broadcast)."""
        lo, hi = np.broadcast_arrays(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))
        out = np.empty(lo.shape)
        lo_inf, hi_inf = np.isneginf(lo), np.isposinf(hi)
        both = lo_inf & hi_inf
        out[both] = 0.0
        m = lo_inf & ~hi_inf
        out[m] = self.logcdf(hi[m])
        m = hi_inf & ~lo_inf
        out[m] = self.logcdf(-lo[m])  # P(Z ≥ lo) = P(Z ≤ −lo)
        m = ~lo_inf & ~hi_inf
        if np.any(m):
            a, b = lo[m], hi[m]
            lower_side = a + b <= 0  # the interval lies mostly in the lower tail: difference of CDFs
            big = np.where(lower_side, self.logcdf(b), self.logcdf(-a))
            small = np.where(lower_side, self.logcdf(a), self.logcdf(-b))
            out[m] = big + _log1mexp(small - big)
        return out


@dataclass(frozen=True)
class LaplaceNoise(Noise):
    b: float

    @property
    def scale(self) -> float:  # type: ignore[override]
        return self.b

    def logpdf(self, z: np.ndarray) -> np.ndarray:
        return -math.log(2 * self.b) - np.abs(z) / self.b

    def logcdf(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        return np.where(z <= 0, _LOG_HALF + np.minimum(z, 0.0) / self.b, np.log1p(-0.5 * np.exp(-np.abs(z) / self.b)))


@dataclass(frozen=True)
class GaussianNoise(Noise):
    sd: float

    @property
    def scale(self) -> float:  # type: ignore[override]
        return self.sd

    def logpdf(self, z: np.ndarray) -> np.ndarray:
        return -0.5 * (np.asarray(z) / self.sd) ** 2 - math.log(self.sd) - _LOG_SQRT_2PI

    def logcdf(self, z: np.ndarray) -> np.ndarray:
        return log_ndtr(np.asarray(z, dtype=np.float64) / self.sd)


@dataclass(frozen=True)
class NormalLaplaceNoise(Noise):
    """Lap(b) + N(0, τ²) (Reed's normal-Laplace law), density and CDF in closed form via log Φ.

    f(z) = 1/(2b)·e^{k}[e^{−z/b}Φ(z/τ − τ/b) + e^{z/b}Φ(−z/τ − τ/b)],  k = τ²/(2b²);
    F(z) = Φ(z/τ)(1 − ρ) + ½e^{k}e^{z/b}Φ(−z/τ − τ/b),  ρ = ½e^{k}e^{−z/b}Φ(z/τ − τ/b)/Φ(z/τ) ∈ (0, ½].
    Both terms of F are positive (the first is E[F_Lap(z − G); G ≤ z]), so nothing cancels.
    """

    b: float
    tau: float

    @property
    def scale(self) -> float:  # type: ignore[override]
        return math.hypot(self.b, self.tau)

    def logpdf(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        b, tau = self.b, self.tau
        k = tau**2 / (2 * b**2)
        left = k - z / b + log_ndtr(z / tau - tau / b)
        right = k + z / b + log_ndtr(-z / tau - tau / b)
        return -math.log(2 * b) + np.logaddexp(left, right)

    def logcdf(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        b, tau = self.b, self.tau
        k = tau**2 / (2 * b**2)
        log_phi = log_ndtr(z / tau)
        log_rho = np.minimum(_LOG_HALF + k - z / b + log_ndtr(z / tau - tau / b) - log_phi, _LOG_HALF)
        first = log_phi + np.log1p(-np.exp(log_rho))
        second = _LOG_HALF + k + z / b + log_ndtr(-z / tau - tau / b)
        return np.logaddexp(first, second)


def laplace_with_error(b: float, tau: float) -> Noise:
    """Lap(b) + N(0, τ²): the noise of a Laplace report about an entity with error sd τ (plain Laplace at τ = 0)."""
    return LaplaceNoise(b) if tau == 0 else NormalLaplaceNoise(b, tau)


# --------------------------------------------------------------------------------------------
# The clean answer clip(x + e, 0, 1): closed-form expectations
# --------------------------------------------------------------------------------------------


def _psi(z: np.ndarray) -> np.ndarray:
    """∫_{−∞}^{z} Φ(s) ds = zΦ(z) + φ(z)."""
    return z * ndtr(z) + np.exp(-0.5 * z * z - _LOG_SQRT_2PI)


def expected_clamped_affine(x: np.ndarray, tau: float, alpha: float, beta: float, lo: float, hi: float) -> np.ndarray:
    """E[clamp(α + β·clip(x + e, 0, 1), lo, hi)] for e ~ N(0, τ²) (elementwise in x).

    g(u) = clamp(α + βu, lo, hi) is monotone on [0, 1], so g(clip(y, 0, 1)) = clamp(α + βy, A, B)
    with [A, B] the range of g on [0, 1]; and for W ~ N(m, s²),
    E[clamp(W, A, B)] = A + s·(ψ((m − A)/s) − ψ((m − B)/s)).
    """
    g0, g1 = min(max(alpha, lo), hi), min(max(alpha + beta, lo), hi)
    a, b = min(g0, g1), max(g0, g1)
    m = alpha + beta * np.asarray(x, dtype=np.float64)
    s = abs(beta) * tau
    if a == b:
        return np.full(m.shape, a)
    if s == 0:
        return np.clip(m, a, b)
    return a + s * (_psi((m - a) / s) - _psi((m - b) / s))


def prob_clip_in(x: np.ndarray, tau: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """P(clip(x + e, 0, 1) ∈ [lo, hi]) for e ~ N(0, τ²), broadcast over x, lo, hi."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    empty = (lo > 1.0) | (hi < 0.0) | (lo > hi)
    y_lo = np.where(lo <= 0.0, -np.inf, lo)  # the atom at 0 is inside when lo ≤ 0
    y_hi = np.where(hi >= 1.0, np.inf, hi)
    if tau == 0:
        p = ((x >= y_lo) & (x <= y_hi)).astype(np.float64)
    else:
        p = ndtr((y_hi - x) / tau) - ndtr((y_lo - x) / tau)
    return np.where(empty, 0.0, np.clip(p, 0.0, 1.0))
