"""Likelihood kernels, one per mechanism family, and :class:`ReportModel` (mechanism + entity error sd)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from diagnosis.posterior.noise import (
    _expected_clamped_affine,
    _GaussianNoise,
    _LaplaceNoise,
    _Noise,
    _NormalLaplaceNoise,
    _prob_clip_in,
)
from privacy.bounded import DuchiRandomizer, HybridRandomizer, PiecewiseRandomizer
from privacy.mechanisms import Mechanism
from privacy.sampling import RELEASE_GRID

_MATCH_TOL = 1e-9  # a report within this of a discrete output value is that value


class DegeneratePosteriorError(ValueError):
    """The reports have zero likelihood everywhere under the model (e.g. disagreeing noiseless reports)."""


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
        c_minus_1 = self.randomizer.bound_excess
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
        return self.randomizer.densities

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
