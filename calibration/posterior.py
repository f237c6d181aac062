"""Bayes post-processing at the aggregator: the posterior of each concept's mastery.

Every entity's mechanism is public (``Mechanism.describe()``), so the aggregator can write down
the likelihood of each privatized report and combine the reports of all entities with a prior
into a posterior for the concept's mastery x ∈ [0, 1]. Everything here is a function of the
released reports and public parameters only: it is post-processing and costs no privacy.

**Model.** For one student and one concept, the latent mastery is x ∈ [0, 1] with a
Beta(a, b) prior (fitted per concept on the calibration split, :func:`fit_beta_prior`; uniform
when there is none). Entity j's clean answer is u_j = x + e_j with e_j ~ N(0, τ_j²) independent
(τ_j = ``entity_error_sd``, default 0: the entity reports the truth; fit it with
:func:`fit_entity_error_sd`). The entity has no bias in this model: a biased entity's τ fitted as
a root-mean-square error widens the posterior instead. Entity j releases r_j = M_j(u_j) with its
public mechanism M_j, independently of the other entities. The likelihood of each report:

* ``laplace`` (the paper's): r = clip(u + Lap(b), 0, 1), b = Δ/ε. A report strictly inside
  (0, 1) contributes the density of r − x under Lap(b) ⊛ N(0, τ²) (the normal-Laplace law, in
  closed form; plain Laplace when τ = 0). A report exactly 0 or 1 is a point mass:
  P(r = 0 | x) = F(−x), P(r = 1 | x) = 1 − F(1 − x) = F(x − 1). The two kinds of report are
  measured against different dominating measures (Lebesgue, atoms), but for a posterior over x
  only the x-dependence of each factor matters, and that is exact. Exact for this model (the
  Laplace mechanism does not clamp its input).
* ``analytic_gaussian``: r = clip(u + N(0, σ²), 0, 1): as Laplace with N(0, σ² + τ²). The
  mechanism clamps its input u to [0, 1] first; with τ > 0 that clamp is *ignored* (an
  approximation of order τ near the ends, negligible when τ ≪ σ). The release's 2^-20 rounding is
  ignored (treated as a density).
* ``secure_laplace`` (snapping): exact on its output grid. The release is ½ + kΛ before the
  final clip, so each report is an interval of the pre-rounding value z = (u − ½) + Lap(λ):
  interior r = ½ + kΛ ⇔ z ∈ [(k − ½)Λ, (k + ½)Λ); r = 0 ⇔ z < (k₀ + ½)Λ with k₀ = ⌊−½/Λ⌋;
  r = 1 ⇔ z ≥ (k₁ − ½)Λ with k₁ = ⌈½/Λ⌉. The floating-point Laplace draw is treated as exact
  Laplace; with τ > 0 the noise is normal-Laplace and the input clamp is ignored, as above.
* ``duchi``: t = 2·clip(u, 0, 1) − 1 is released as ±C (x-scale (1 ± C)/2) with
  P(+) = ½ + t/(2C) at ε_c = ``epsilon_per_coordinate``. P(+) is linear in t, so the entity error
  enters exactly through E[clip(x + e, 0, 1)] (closed form).
* ``piecewise``: the known piecewise-constant density of the output given t (density p_high on
  [l(t), r(t)], p_low elsewhere on [−C, C]). With τ > 0 it is averaged exactly over the clamped
  clean answer: p_low + (p_high − p_low)·P(l(t) ≤ v ≤ r(t)). The 2^-20 release rounding is
  ignored. ``clip_output=True`` adds point masses at 0 and 1 (closed form, also with τ > 0).
* ``hybrid``: PM with probability α, Duchi otherwise. A report equal to one of Duchi's two
  values is a Duchi point mass; any other report is PM's density times α.
* ``none`` (no privacy): r = u. With τ > 0 this is the Gaussian case with σ = 0 (the answer's own
  clip to [0, 1] gives the point masses). With τ = 0 the report *is* x: the posterior is a point
  mass at r; noiseless reports that disagree are impossible under the model and raise
  :class:`DegeneratePosteriorError` (give those entities a τ > 0).

Mechanisms are assumed to release on [0, 1] (the ``lower``/``upper`` of ``LaplaceMechanism`` are
not in its description; the pipeline always uses the defaults).

**Computation.** The posterior is evaluated on G equal cells of [0, 1] (G = ``grid_size``,
raised automatically to 40 cells per noise scale when a report is sharper than that, up to
:data:`MAX_GRID_SIZE`). Each cell's weight is the prior's exact mass of the cell (regularized
incomplete beta, so priors with a, b < 1 are handled) times the likelihood at the cell centre;
the posterior is treated as uniform within a cell for quantiles and the variance. Log-space
throughout. Error: O(h²) for smooth likelihoods, O(h) where a likelihood jumps (the piecewise
mechanism with τ = 0), h = 1/G.

Public API: :class:`BetaPrior`, :func:`fit_beta_prior`, :func:`fit_concept_priors`,
:func:`fit_entity_error_sd`, :class:`ReportModel`, :func:`posterior_grid`,
:func:`posterior_summary`, :func:`posterior_summaries` (vectorized over students),
:func:`posterior_aggregate` and :class:`PosteriorAggregator` (an :class:`Aggregator`).
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import betainc, log_ndtr, ndtr

from calibration.aggregation import Aggregation, Aggregator
from privacy.bounded import DuchiRandomizer, HybridRandomizer, PiecewiseRandomizer
from privacy.mechanisms import Mechanism
from privacy.sampling import RELEASE_GRID

__all__ = [
    "DEFAULT_GRID_SIZE",
    "DEFAULT_LEVEL",
    "MAX_GRID_SIZE",
    "UNIFORM_PRIOR",
    "BetaPrior",
    "DegeneratePosteriorError",
    "Estimate",
    "PosteriorAggregation",
    "PosteriorAggregator",
    "PosteriorSummaries",
    "PosteriorSummary",
    "ReportModel",
    "fit_beta_prior",
    "fit_concept_priors",
    "fit_entity_error_sd",
    "posterior_aggregate",
    "posterior_grid",
    "posterior_summaries",
    "posterior_summary",
]

Estimate = Literal["mean", "median"]

DEFAULT_GRID_SIZE = 1001
DEFAULT_LEVEL = 0.9
MAX_GRID_SIZE = 100_001
_CELLS_PER_SCALE = 40
_MATCH_TOL = 1e-9  # a report within this of a discrete output value is that value
_LOG_HALF = math.log(0.5)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_ROW_BUDGET = 2_000_000  # rows × cells evaluated at once


class DegeneratePosteriorError(ValueError):
    """The reports have zero likelihood everywhere under the model (e.g. disagreeing noiseless reports)."""


# --------------------------------------------------------------------------------------------
# Prior
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BetaPrior:
    """Beta(a, b) prior on a concept's mastery; Beta(1, 1) is uniform."""

    a: float = 1.0
    b: float = 1.0

    def __post_init__(self) -> None:
        for name, v in (("a", self.a), ("b", self.b)):
            if isinstance(v, bool) or not (math.isfinite(v) and v > 0):
                raise ValueError(f"Beta prior parameter {name} must be a finite number > 0, got {v!r}")

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    def cell_log_masses(self, edges: np.ndarray) -> np.ndarray:
        """log P(prior ∈ [edges[i], edges[i+1]]), exact (lower-tail or upper-tail differences, whichever is smaller)."""
        cdf = betainc(self.a, self.b, edges)
        sf = betainc(self.b, self.a, 1.0 - edges)  # P(X > e) = I_{1−e}(b, a)
        lower = np.diff(cdf)
        upper = -np.diff(sf)
        mass = np.where(cdf[1:] <= 0.5, lower, upper)
        with np.errstate(divide="ignore"):
            return np.log(np.maximum(mass, 0.0))


UNIFORM_PRIOR = BetaPrior(1.0, 1.0)


def _finite_unit_values(values: Iterable[float], what: str) -> np.ndarray:
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a flat sequence of numbers")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite")
    return arr


def fit_beta_prior(values: Sequence[float], *, min_shape: float = 0.5, max_shape: float = 1000.0) -> BetaPrior:
    """Method-of-moments Beta prior from true mastery values (clipped to [0, 1]).

    a = m·c, b = (1 − m)·c with c = m(1 − m)/v − 1 (m, v the sample mean and unbiased variance).
    Each shape is then clipped to [min_shape, max_shape]: values with variance ≥ m(1 − m) (e.g.
    binary truth) give the U-shaped floor, constant values the cap. Fewer than two values: uniform.
    """
    if not 0 < min_shape <= max_shape:
        raise ValueError(f"need 0 < min_shape <= max_shape, got {min_shape}, {max_shape}")
    x = np.clip(_finite_unit_values(values, "values"), 0.0, 1.0)
    if x.size < 2:
        return UNIFORM_PRIOR
    m = float(x.mean())
    v = float(x.var(ddof=1))
    if m <= 0.0 or m >= 1.0:  # every value at one end
        a, b = (min_shape, max_shape) if m <= 0.0 else (max_shape, min_shape)
        return BetaPrior(a, b)
    if v <= 0.0:
        c = math.inf
    else:
        c = m * (1 - m) / v - 1
    if not c > 0:
        return BetaPrior(min_shape, min_shape)
    a = m * c if math.isfinite(c) else max_shape
    b = (1 - m) * c if math.isfinite(c) else max_shape
    if not math.isfinite(c):  # constant values: as concentrated as allowed, at the right mean
        scale = max_shape / max(m, 1 - m)
        a, b = m * scale, (1 - m) * scale
    return BetaPrior(float(np.clip(a, min_shape, max_shape)), float(np.clip(b, min_shape, max_shape)))


def fit_concept_priors(
    truth: Iterable[Mapping[str, float]], concepts: Sequence[str] | None = None, **kwargs: float
) -> dict[str, BetaPrior]:
    """A :func:`fit_beta_prior` per concept from per-student truth dicts (concept -> mastery).

    ``concepts`` restricts/orders the result; a listed concept without values gets the uniform prior.
    """
    by_concept: dict[str, list[float]] = {}
    for row in truth:
        for concept, value in row.items():
            by_concept.setdefault(concept, []).append(float(value))
    names = list(concepts) if concepts is not None else list(by_concept)
    return {c: fit_beta_prior(by_concept.get(c, []), **kwargs) for c in names}


def fit_entity_error_sd(answers: Sequence[float], truth: Sequence[float]) -> float:
    """τ_j for :class:`ReportModel`: the root-mean-square error of an entity's *clean* answers vs truth.

    RMS (bias included), not the residual sd: the model has no bias term, so a biased entity is
    described as a noisier one. Use clean answers (a calibration run without privacy noise);
    privatized answers would count the mechanism's noise twice.
    """
    y = _finite_unit_values(answers, "answers")
    t = _finite_unit_values(truth, "truth")
    if y.shape != t.shape:
        raise ValueError(f"answers and truth differ in length ({y.size} vs {t.size})")
    if y.size == 0:
        return 0.0
    return float(np.sqrt(np.mean((y - t) ** 2)))


# --------------------------------------------------------------------------------------------
# Noise laws (symmetric about 0): log density and log CDF
# --------------------------------------------------------------------------------------------


def _log1mexp(a: np.ndarray) -> np.ndarray:
    """log(1 − e^a) for a ≤ 0, accurately."""
    a = np.minimum(a, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(a > -math.log(2), np.log(-np.expm1(a)), np.log1p(-np.exp(a)))


class _Noise(ABC):
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
class _LaplaceNoise(_Noise):
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
class _GaussianNoise(_Noise):
    sd: float

    @property
    def scale(self) -> float:  # type: ignore[override]
        return self.sd

    def logpdf(self, z: np.ndarray) -> np.ndarray:
        return -0.5 * (np.asarray(z) / self.sd) ** 2 - math.log(self.sd) - _LOG_SQRT_2PI

    def logcdf(self, z: np.ndarray) -> np.ndarray:
        return log_ndtr(np.asarray(z, dtype=np.float64) / self.sd)


@dataclass(frozen=True)
class _NormalLaplaceNoise(_Noise):
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


# --------------------------------------------------------------------------------------------
# The clean answer clip(x + e, 0, 1): closed-form expectations
# --------------------------------------------------------------------------------------------


def _psi(z: np.ndarray) -> np.ndarray:
    """∫_{−∞}^{z} Φ(s) ds = zΦ(z) + φ(z)."""
    return z * ndtr(z) + np.exp(-0.5 * z * z - _LOG_SQRT_2PI)


def _expected_clamped_affine(x: np.ndarray, tau: float, alpha: float, beta: float, lo: float, hi: float) -> np.ndarray:
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


def _prob_clip_in(x: np.ndarray, tau: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
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


# --------------------------------------------------------------------------------------------
# Likelihood kernels, one per mechanism family
# --------------------------------------------------------------------------------------------


def _matches(r: np.ndarray, value: float) -> np.ndarray:
    return np.abs(r - value) <= _MATCH_TOL * max(1.0, abs(value))


class _Kernel(ABC):
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


def _check_unit(r: np.ndarray, name: str) -> None:
    if np.any((r < 0.0) | (r > 1.0)):
        bad = r[(r < 0.0) | (r > 1.0)][0]
        raise ValueError(f"{name} releases values in [0, 1]; got report {bad!r}")


class _Exact(_Kernel):
    exact = True

    @property
    def scale(self) -> float:
        return 0.0

    def check(self, r: np.ndarray) -> None:
        _check_unit(r, "a noiseless entity")

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise DegeneratePosteriorError("a noiseless report without entity error is a point mass, not a density")


@dataclass(frozen=True)
class _ClippedAdditive(_Kernel):
    """r = clip(x + Z, 0, 1) with symmetric noise Z: density inside, point masses at 0 and 1."""

    noise: _Noise
    name: str

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
class _SnappedLaplace(_Kernel):
    """Secure (snapping) Laplace: exact probabilities of the grid points ½ + kΛ, clipped to [0, 1]."""

    noise: _Noise
    grid: float

    @property
    def scale(self) -> float:
        return self.noise.scale

    def _k(self, r: np.ndarray) -> np.ndarray:
        return np.rint((r - 0.5) / self.grid)

    def check(self, r: np.ndarray) -> None:
        _check_unit(r, "secure_laplace")
        inner = (r > 0.0) & (r < 1.0)
        off = inner & (np.abs(r - (0.5 + self._k(r) * self.grid)) > _MATCH_TOL)
        if np.any(off):
            raise ValueError(f"secure_laplace releases ½ + k·{self.grid} (clipped); got report {r[off][0]!r}")

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
class _Duchi(_Kernel):
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
        c_minus_1 = 2 / math.expm1(self.randomizer.epsilon)
        up = _expected_clamped_affine(x, self.tau, 0.0, 1.0, 0.0, 1.0)  # E[clip(x + e, 0, 1)]
        down = _expected_clamped_affine(1.0 - x, self.tau, 0.0, 1.0, 0.0, 1.0)  # 1 − E[clip(x + e, 0, 1)]
        with np.errstate(divide="ignore"):
            return np.log((c_minus_1 + 2 * down) / (2 * c)), np.log((c_minus_1 + 2 * up) / (2 * c))

    def loglik(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        _, plus = self.values()
        log_minus, log_plus = self.log_probabilities(x)
        return np.where(_matches(r, plus)[:, None], log_plus[None, :], log_minus[None, :])


@dataclass(frozen=True)
class _Piecewise(_Kernel):
    randomizer: PiecewiseRandomizer
    tau: float
    clip_output: bool

    @property
    def scale(self) -> float:
        return math.inf

    @property
    def densities(self) -> tuple[float, float]:
        """(p_low, p_high) of the output on the t scale: p_high/p_low = e^ε."""
        s = math.exp(self.randomizer.epsilon / 2)
        s1 = math.expm1(self.randomizer.epsilon / 2)
        return s1 / (2 * s * (s + 1)), s * s1 / (2 * (s + 1))

    def support(self) -> tuple[float, float]:
        if self.clip_output:
            return 0.0, 1.0
        c = self.randomizer.bound
        return (1 - c) / 2 - RELEASE_GRID, (1 + c) / 2 + RELEASE_GRID

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
        p_in = _prob_clip_in(x[None, :], self.tau, (v + 1) / (c + 1), (v + c) / (c + 1))
        return np.log(2 * (p_low * (1 - p_in) + p_high * p_in))

    def log_masses(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P(v ≤ −1 | x), log P(v ≥ 1 | x): the point masses at 0 and 1 when the output is clipped."""
        c = self.randomizer.bound
        p_low, p_high = self.densities
        # Overlap of [l(t), r(t)] with [−C, −1] is clamp(C − 1 − (C+1)u, 0, C − 1); with [1, C], clamp((C+1)u − 2, ...).
        below = _expected_clamped_affine(x, self.tau, c - 1, -(c + 1), 0.0, c - 1)
        above = _expected_clamped_affine(x, self.tau, -2.0, c + 1, 0.0, c - 1)
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
class _Hybrid(_Kernel):
    randomizer: HybridRandomizer
    tau: float
    clip_output: bool

    @property
    def scale(self) -> float:
        return math.inf

    @property
    def duchi(self) -> _Duchi:
        return _Duchi(self.randomizer.duchi, self.tau, self.clip_output)

    @property
    def piecewise(self) -> _Piecewise:
        return _Piecewise(self.randomizer.piecewise, self.tau, self.clip_output)

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
        log_a, log_1a = math.log(alpha), math.log1p(-alpha)
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


def _number(description: Mapping[str, object], key: str) -> float:
    try:
        value = float(description[key])  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"mechanism description {dict(description)!r} lacks a numeric {key!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"mechanism description needs a finite {key!r} > 0, got {value}")
    return value


def _kernel_for(description: Mapping[str, object], tau: float) -> _Kernel:
    name = description.get("mechanism")
    if name == "none":
        return _Exact() if tau == 0 else _ClippedAdditive(_GaussianNoise(tau), "none")
    if name == "laplace":
        b = _number(description, "noise_scale")
        return _ClippedAdditive(_LaplaceNoise(b) if tau == 0 else _NormalLaplaceNoise(b, tau), "laplace")
    if name in ("analytic_gaussian", "gaussian"):
        return _ClippedAdditive(_GaussianNoise(math.hypot(_number(description, "noise_scale"), tau)), str(name))
    if name == "secure_laplace":
        b = _number(description, "noise_scale")
        noise = _LaplaceNoise(b) if tau == 0 else _NormalLaplaceNoise(b, tau)
        return _SnappedLaplace(noise, _number(description, "snapping_grid"))
    if name in ("duchi", "piecewise", "hybrid"):
        eps_c = _number(description, "epsilon_per_coordinate")
        clip = bool(description.get("clip_output", False))
        if name == "duchi":
            return _Duchi(DuchiRandomizer(epsilon=eps_c), tau, clip)
        if name == "piecewise":
            return _Piecewise(PiecewiseRandomizer(epsilon=eps_c), tau, clip)
        return _Hybrid(HybridRandomizer(epsilon=eps_c), tau, clip)
    raise ValueError(f"no likelihood for mechanism {name!r}")


@dataclass(frozen=True)
class ReportModel:
    """How one entity's report arose: its public mechanism (``Mechanism.describe()``) and its error sd τ."""

    mechanism: Mapping[str, object]
    entity_error_sd: float = 0.0
    _kernel: _Kernel = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tau = self.entity_error_sd
        if isinstance(tau, bool) or not (isinstance(tau, int | float) and math.isfinite(tau) and tau >= 0):
            raise ValueError(f"entity_error_sd must be a finite number >= 0, got {tau!r}")
        if not isinstance(self.mechanism, Mapping):
            raise TypeError(f"mechanism must be a Mechanism.describe() mapping, got {self.mechanism!r}")
        object.__setattr__(self, "mechanism", dict(self.mechanism))
        object.__setattr__(self, "entity_error_sd", float(tau))
        object.__setattr__(self, "_kernel", _kernel_for(self.mechanism, float(tau)))

    @classmethod
    def from_mechanism(cls, mechanism: Mechanism, entity_error_sd: float = 0.0) -> ReportModel:
        return cls(mechanism.describe(), entity_error_sd)

    @property
    def noiseless(self) -> bool:
        """The report equals x exactly (no privacy noise and τ = 0)."""
        return self._kernel.exact

    def log_likelihood(self, reports: Sequence[float] | np.ndarray, x: Sequence[float] | np.ndarray) -> np.ndarray:
        """log p(report_i | x_g), shape (len(reports), len(x)); a point-mass report gives a log probability."""
        r = np.atleast_1d(np.asarray(reports, dtype=np.float64))
        xs = np.atleast_1d(np.asarray(x, dtype=np.float64))
        if not np.all(np.isfinite(r)):
            raise ValueError("reports must be finite")
        self._kernel.check(r)
        return self._kernel.loglik(r, xs)


# --------------------------------------------------------------------------------------------
# Posterior on a grid
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PosteriorSummary:
    """Posterior mean, median, equal-tailed credible interval [lower, upper] at ``level``, and sd."""

    mean: float
    median: float
    lower: float
    upper: float
    sd: float
    level: float = DEFAULT_LEVEL

    @property
    def interval(self) -> tuple[float, float]:
        return self.lower, self.upper

    def estimate(self, kind: Estimate = "mean") -> float:
        if kind == "mean":
            return self.mean
        if kind == "median":
            return self.median
        raise ValueError(f"estimate must be 'mean' or 'median', got {kind!r}")


@dataclass(frozen=True)
class PosteriorSummaries:
    """:class:`PosteriorSummary` fields as arrays, one entry per row of a report matrix."""

    mean: np.ndarray
    median: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    sd: np.ndarray
    level: float = DEFAULT_LEVEL

    def __len__(self) -> int:
        return int(self.mean.size)

    def __getitem__(self, i: int) -> PosteriorSummary:
        return PosteriorSummary(
            float(self.mean[i]),
            float(self.median[i]),
            float(self.lower[i]),
            float(self.upper[i]),
            float(self.sd[i]),
            self.level,
        )


def _check_level(level: float) -> None:
    if isinstance(level, bool) or not (isinstance(level, int | float) and 0 < level < 1):
        raise ValueError(f"level must lie in (0, 1), got {level!r}")


def _grid_cells(models: Sequence[ReportModel], grid_size: int) -> int:
    if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 2:
        raise ValueError(f"grid_size must be an integer >= 2, got {grid_size!r}")
    scales = [m._kernel.scale for m in models if not m.noiseless]
    finest = min(scales, default=math.inf)
    if finest <= 0 or not math.isfinite(finest):
        return grid_size
    return int(min(MAX_GRID_SIZE, max(grid_size, math.ceil(_CELLS_PER_SCALE / finest))))


def _as_matrix(reports: np.ndarray | Sequence[Sequence[float]], n_models: int) -> np.ndarray:
    r = np.asarray(reports, dtype=np.float64)
    if r.ndim == 1 and n_models == 1:
        r = r[:, None]
    if r.ndim != 2 or r.shape[1] != n_models:
        raise ValueError(f"reports must have shape (n, {n_models}), got {r.shape}")
    if np.any(np.isinf(r)):
        raise ValueError("reports must be finite (NaN marks a missing report)")
    return r


def _exact_values(r: np.ndarray, models: Sequence[ReportModel]) -> np.ndarray:
    """Per row, the common value of its noiseless reports (NaN when it has none)."""
    cols = [j for j, m in enumerate(models) if m.noiseless]
    out = np.full(r.shape[0], np.nan)
    if not cols:
        return out
    sub = r[:, cols]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: no noiseless report there
        lo, hi = np.nanmin(sub, axis=1), np.nanmax(sub, axis=1)
    has = ~np.isnan(lo)
    disagree = has & (hi - lo > _MATCH_TOL)
    if np.any(disagree):
        i = int(np.flatnonzero(disagree)[0])
        raise DegeneratePosteriorError(
            f"noiseless reports disagree ({lo[i]!r} vs {hi[i]!r}): impossible without entity error; "
            "give those entities an entity_error_sd > 0"
        )
    out[has] = lo[has]
    return out


def _log_weights(r: np.ndarray, models: Sequence[ReportModel], prior: BetaPrior, cells: int) -> np.ndarray:
    """Unnormalized log posterior cell weights, shape (n, cells); noiseless columns are skipped."""
    edges = np.linspace(0.0, 1.0, cells + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    out = np.broadcast_to(prior.cell_log_masses(edges), (r.shape[0], cells)).copy()
    for j, model in enumerate(models):
        if model.noiseless:
            continue
        present = ~np.isnan(r[:, j])
        if np.any(present):
            out[present] += model.log_likelihood(r[present, j], centres)
    return out


def _summarize(logw: np.ndarray, level: float) -> tuple[np.ndarray, ...]:
    n, cells = logw.shape
    h = 1.0 / cells
    top = np.max(logw, axis=1, keepdims=True)
    if np.any(~np.isfinite(top)):
        raise DegeneratePosteriorError("the reports have zero likelihood everywhere under the model and prior")
    w = np.exp(logw - top)
    w /= w.sum(axis=1, keepdims=True)
    centres = (np.arange(cells) + 0.5) * h
    mean = w @ centres
    var = w @ centres**2 - mean**2 + h * h / 12
    cum = np.cumsum(w, axis=1)
    cum[:, -1] = 1.0
    rows = np.arange(n)

    def quantile(q: float) -> np.ndarray:
        i = np.minimum(np.sum(cum < q, axis=1), cells - 1)
        below = np.where(i > 0, cum[rows, np.maximum(i - 1, 0)], 0.0)
        wi = w[rows, i]
        frac = np.where(wi > 0, (q - below) / np.where(wi > 0, wi, 1.0), 0.5)
        return (i + np.clip(frac, 0.0, 1.0)) * h

    tail = (1 - level) / 2
    return (
        np.clip(mean, 0.0, 1.0),
        quantile(0.5),
        quantile(tail),
        quantile(1 - tail),
        np.sqrt(np.maximum(var, 0.0)),
    )


def posterior_summaries(
    reports: np.ndarray | Sequence[Sequence[float]],
    models: Sequence[ReportModel],
    prior: BetaPrior = UNIFORM_PRIOR,
    *,
    level: float = DEFAULT_LEVEL,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> PosteriorSummaries:
    """Posterior summaries for n independent problems sharing the entities' models and the prior.

    ``reports`` has shape (n, len(models)): row i holds student i's report from each entity
    (NaN where an entity did not answer). Vectorized: use this for simulations and evaluation.
    """
    _check_level(level)
    models = list(models)
    r = _as_matrix(reports, len(models))
    for j, model in enumerate(models):
        col = r[:, j]
        present = col[~np.isnan(col)]
        if present.size:
            model._kernel.check(present)
    exact = _exact_values(r, models)
    cells = _grid_cells(models, grid_size)
    n = r.shape[0]
    parts: list[tuple[np.ndarray, ...]] = []
    step = max(1, _ROW_BUDGET // cells)
    for start in range(0, n, step):
        parts.append(_summarize(_log_weights(r[start : start + step], models, prior, cells), level))
    if parts:
        mean, median, lower, upper, sd = (np.concatenate(p) for p in zip(*parts))
    else:
        mean = median = lower = upper = sd = np.empty(0)
    has = ~np.isnan(exact)
    for arr in (mean, median, lower, upper):
        arr[has] = exact[has]
    sd[has] = 0.0
    return PosteriorSummaries(mean, median, lower, upper, sd, float(level))


def _split(reports: Sequence[tuple[float, ReportModel]]) -> tuple[np.ndarray, list[ReportModel]]:
    values, models = [], []
    for item in reports:
        value, model = item
        if not isinstance(model, ReportModel):
            raise TypeError(f"each report must be (value, ReportModel), got {item!r}")
        values.append(float(value))
        models.append(model)
    r = np.asarray(values, dtype=np.float64).reshape(1, len(values))
    if not np.all(np.isfinite(r)):
        raise ValueError("reports must be finite")
    return r, models


def posterior_summary(
    reports: Sequence[tuple[float, ReportModel]],
    prior: BetaPrior = UNIFORM_PRIOR,
    *,
    level: float = DEFAULT_LEVEL,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> PosteriorSummary:
    """The posterior of one concept's mastery from ``(report, model)`` pairs (no reports: the prior)."""
    _check_level(level)
    r, models = _split(reports)
    return posterior_summaries(r, models, prior, level=level, grid_size=grid_size)[0]


def posterior_grid(
    reports: Sequence[tuple[float, ReportModel]],
    prior: BetaPrior = UNIFORM_PRIOR,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> tuple[np.ndarray, np.ndarray]:
    """(cell centres, posterior density at them) with Σ density·h = 1, h = 1/len(grid).

    The cell count is ``grid_size`` or more (see the module docstring). A noiseless report
    (no noise, τ = 0) makes the posterior a point mass: all of it lands in the cell holding it.
    """
    r, models = _split(reports)
    for j, model in enumerate(models):
        model._kernel.check(r[:, j])
    exact = _exact_values(r, models)[0]
    cells = _grid_cells(models, grid_size)
    h = 1.0 / cells
    centres = (np.arange(cells) + 0.5) * h
    if not math.isnan(exact):
        density = np.zeros(cells)
        density[min(int(exact * cells), cells - 1)] = cells
        return centres, density
    logw = _log_weights(r, models, prior, cells)[0]
    top = float(np.max(logw))
    if not math.isfinite(top):
        raise DegeneratePosteriorError("the reports have zero likelihood everywhere under the model and prior")
    w = np.exp(logw - top)
    return centres, w / (w.sum() * h)


# --------------------------------------------------------------------------------------------
# Aggregation over entities and concepts
# --------------------------------------------------------------------------------------------

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> privatized value


@dataclass(frozen=True)
class PosteriorAggregation(Aggregation):
    """An :class:`Aggregation` whose mastery is a posterior estimate, with credible intervals.

    ``intervals``: concept -> (lower, upper), the equal-tailed ``level`` credible interval (the
    response's ``mastery_interval``). Unpacks as ``mastery, intervals = posterior_aggregate(...)``.
    """

    intervals: dict[str, tuple[float, float]]
    summaries: dict[str, PosteriorSummary]
    level: float
    estimate: str

    def __iter__(self) -> Iterator[dict]:
        yield self.mastery
        yield self.intervals


def _per_entity_mechanisms(
    mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object], entities: Iterable[str]
) -> dict[str, Mapping[str, object]]:
    if isinstance(mechanisms.get("mechanism"), str):  # one description shared by every entity
        return {e: mechanisms for e in entities}  # type: ignore[misc]
    out: dict[str, Mapping[str, object]] = {}
    for e in entities:
        if e not in mechanisms:
            raise ValueError(f"no mechanism description for entity {e!r}")
        out[e] = mechanisms[e]  # type: ignore[assignment]
    return out


def posterior_aggregate(
    predictions: Predictions,
    concepts: Sequence[str],
    mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object],
    priors: Mapping[str, BetaPrior] | None = None,
    entity_error_sd: Mapping[str, float] | None = None,
    estimate: Estimate = "mean",
    *,
    level: float = DEFAULT_LEVEL,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> PosteriorAggregation:
    """Posterior mastery per concept over the entities that answered it, with credible intervals.

    ``mechanisms``: entity -> ``Mechanism.describe()``, or one description used for every entity
    (the pipeline privatizes all entities with the same mechanism). ``priors``: concept -> prior
    (uniform where absent). ``entity_error_sd``: entity -> τ (0 where absent). Concepts no entity
    answered are listed in ``missing``, as in :func:`calibration.aggregation.residual_aggregate`.
    Raises :class:`DegeneratePosteriorError` when noiseless reports (τ = 0) disagree.
    """
    if estimate not in ("mean", "median"):
        raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
    _check_level(level)
    priors = priors or {}
    errors = entity_error_sd or {}
    descriptions = _per_entity_mechanisms(mechanisms, predictions)
    models = {e: ReportModel(descriptions[e], float(errors.get(e, 0.0))) for e in predictions}
    mastery: dict[str, float] = {}
    intervals: dict[str, tuple[float, float]] = {}
    summaries: dict[str, PosteriorSummary] = {}
    missing: list[str] = []
    contributors: dict[str, list[str]] = {}
    for concept in concepts:
        names = [name for name, values in predictions.items() if concept in values]
        if not names:
            missing.append(concept)
            continue
        summary = posterior_summary(
            [(float(predictions[n][concept]), models[n]) for n in names],
            priors.get(concept, UNIFORM_PRIOR),
            level=level,
            grid_size=grid_size,
        )
        summaries[concept] = summary
        mastery[concept] = summary.estimate(estimate)
        intervals[concept] = summary.interval
        contributors[concept] = names
    return PosteriorAggregation(
        mastery=mastery,
        missing=missing,
        contributors=contributors,
        intervals=intervals,
        summaries=summaries,
        level=float(level),
        estimate=estimate,
    )


class PosteriorAggregator(Aggregator):
    """Bayes post-processing as an :class:`Aggregator`.

    The mechanism is chosen per request, so bind it before aggregating:
    ``aggregator.with_mechanism(mechanism.describe()).aggregate(predictions, concepts)``.
    """

    def __init__(
        self,
        *,
        mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object] | None = None,
        priors: Mapping[str, BetaPrior] | None = None,
        entity_error_sd: Mapping[str, float] | None = None,
        estimate: Estimate = "mean",
        level: float = DEFAULT_LEVEL,
        grid_size: int = DEFAULT_GRID_SIZE,
        calibration_id: str | None = None,
    ) -> None:
        if estimate not in ("mean", "median"):
            raise ValueError(f"estimate must be 'mean' or 'median', got {estimate!r}")
        _check_level(level)
        self.mechanisms = mechanisms
        self.priors = dict(priors or {})
        self.entity_error_sd = dict(entity_error_sd or {})
        self.estimate: Estimate = estimate
        self.level = float(level)
        self.grid_size = grid_size
        self._calibration_id = calibration_id

    @property
    def calibration_id(self) -> str | None:
        return self._calibration_id

    def with_mechanism(
        self, mechanisms: Mapping[str, Mapping[str, object]] | Mapping[str, object]
    ) -> PosteriorAggregator:
        """A copy bound to this request's mechanism description(s)."""
        return PosteriorAggregator(
            mechanisms=mechanisms,
            priors=self.priors,
            entity_error_sd=self.entity_error_sd,
            estimate=self.estimate,
            level=self.level,
            grid_size=self.grid_size,
            calibration_id=self._calibration_id,
        )

    def aggregate(self, predictions: Predictions, concepts: Sequence[str]) -> PosteriorAggregation:
        if self.mechanisms is None:
            raise ValueError("PosteriorAggregator needs the request's mechanism: call with_mechanism() first")
        return posterior_aggregate(
            predictions,
            concepts,
            self.mechanisms,
            self.priors,
            self.entity_error_sd,
            self.estimate,
            level=self.level,
            grid_size=self.grid_size,
        )
