"""Bounded-output ε-LDP mechanisms for mastery values in [0, 1] (Duchi et al.; Wang et al. ICDE 2019).

Each value x ∈ [0, 1] is mapped to t = 2x − 1 ∈ [−1, 1], randomized by an unbiased scalar
randomizer (E[t̂ | t] = t), and mapped back as x̂ = (t̂ + 1)/2, so E[x̂ | x] = x and
Var[x̂ | x] = Var[t̂ | t]/4. Outputs are bounded but lie *outside* [0, 1] (in
[(1 − C)/2, (1 + C)/2]); they are deliberately not clipped, since clipping would bias the mean
an aggregator computes over several reports. ``clip_output=True`` clips to [0, 1] for
consumers that need the range: that is post-processing (no privacy cost) and never increases
the error of a single report, but the result is no longer unbiased (``variance`` then bounds
its mean squared error).

Scalar randomizers (domain [−1, 1]):

* :class:`DuchiRandomizer`: output ±C, C = (e^ε+1)/(e^ε−1), P(+C) = ½ + t(e^ε−1)/(2(e^ε+1));
  Var = C² − t².
* :class:`PiecewiseRandomizer` (PM): s = e^{ε/2}, C = (s+1)/(s−1), l(t) = (C+1)/2·t − (C−1)/2,
  r(t) = l(t) + C − 1; uniform on [l, r] with probability s/(s+1), otherwise uniform on
  [−C, l) ∪ (r, C]. Var = t²/(s−1) + (s+3)/(3(s−1)²). A continuous output computed in floating
  point would leak t through its low bits, as the naive Laplace sampler does (``l(t) + (C−1)·U``
  only reaches doubles that depend on t). So PM reports are rounded *stochastically* to the fixed
  grid RELEASE_GRID = 2^-20 (:func:`privacy.sampling.stochastic_round`): the support no longer
  depends on t, the mean is unchanged, and the variance grows by at most 2^-42. Outputs then lie
  within [−C, C] widened by less than one grid step.
* :class:`HybridRandomizer` (HM): PM with probability α = 1 − e^{−ε/2} and Duchi otherwise when
  ε > ε* ≈ 0.61 (:data:`HYBRID_THRESHOLD`), Duchi only below; Var = α·Var_PM + (1−α)·Var_Duchi.

Several concepts: the budget is split, ε_c = ε/d per concept, over ``dimension`` = d concepts
(d = K, or the number of assessed concepts, as for the Laplace mechanism's Δ); the vector is
ε-LDP by basic composition. We do not use Wang et al.'s sample-k scheme (each report perturbs
only k of the d concepts with ε/k and scales them by d/k). It has lower variance when *many
users* report and the aggregator averages each concept over them. Here one student's vector is
released by a handful of entities, and the aggregator needs every assessed concept from every
entity: with sample-k most concepts would get no report at all from a given entity, and the
reported ones would be scaled by d/k far outside [0, 1]. The split keeps one unbiased report per
concept per entity.

Ranges: a randomizer takes ε_c in [COORDINATE_EPSILON_MIN, EPSILON_MAX] = [10⁻⁹, 1000] and a
mechanism 1 ≤ d ≤ DIMENSION_MAX with ε/d in that interval (:mod:`privacy.ranges`). Every closed
form is written so that it neither overflows nor cancels there: C − 1 = 2/(e^ε − 1) as
2e^−ε/(1 − e^−ε), so C ≤ 1 + 4·10⁹ and outputs, variances and densities are finite doubles.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Self, TypeVar

import numpy as np

from privacy.likelihood import DuchiKernel, HybridKernel, LikelihoodKernel, PiecewiseKernel
from privacy.mechanisms import Mechanism, ReleaseCost, described_dimension, described_number
from privacy.ranges import Epsilon, check_coordinate_epsilon, check_dimension, check_split
from privacy.sampling import RELEASE_GRID, stochastic_round

__all__ = [
    "HYBRID_THRESHOLD",
    "BoundedMechanism",
    "DuchiMechanism",
    "DuchiRandomizer",
    "HybridMechanism",
    "HybridRandomizer",
    "PiecewiseMechanism",
    "PiecewiseRandomizer",
    "ScalarRandomizer",
]

# ε* of Wang et al.: below it the hybrid's best mixing weight is 0 (Duchi only). It is
# the root of (s+3)/(3(s−1)²) = ((s²+1)/(s²−1))², s = e^{ε/2}: PM's and Duchi's variance at t = 0.
HYBRID_THRESHOLD = math.log(
    (-5 + 2 * (6353 - 405 * math.sqrt(241)) ** (1 / 3) + 2 * (6353 + 405 * math.sqrt(241)) ** (1 / 3)) / 27
)

_T = TypeVar("_T", np.ndarray, float)  # an array of values, or one float (the same arithmetic on either)


def _inverse_expm1(x: float) -> float:
    """1/(e^x − 1) without overflow: e^−x/(1 − e^−x), accurate for tiny x and 0 (not inf) for huge x."""
    return math.exp(-x) / -math.expm1(-x)


def _signed(t: np.ndarray | float) -> np.ndarray:
    arr = np.asarray(t, dtype=np.float64)
    if not (np.abs(arr) <= 1).all():  # NaN fails the comparison too; one reduction, no wrapper (a per-answer path)
        raise ValueError("inputs must lie in [-1, 1]")
    return arr


@dataclass(frozen=True, kw_only=True)
class ScalarRandomizer(ABC):
    """An unbiased ε-LDP randomizer of one value t ∈ [−1, 1] with output in [−bound, bound]."""

    epsilon: float

    def __post_init__(self) -> None:
        check_coordinate_epsilon(self.epsilon)

    @property
    @abstractmethod
    def bound(self) -> float:
        """C: every output lies in [−C, C]."""

    @abstractmethod
    def sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One independent randomized report per entry of ``t`` (values in [−1, 1])."""

    @abstractmethod
    def variance(self, t: np.ndarray | float) -> np.ndarray:
        """Var[t̂ | t] in closed form."""

    def worst_case_variance(self) -> float:
        """max over t ∈ [−1, 1] of Var[t̂ | t] (every variance here is quadratic in t, so an end or the middle)."""
        return float(np.max(self.variance(np.array([-1.0, 0.0, 1.0]))))

    def variance_at(self, t: float) -> float:
        """Var[t̂ | t] of one ``t`` the caller knows lies in [−1, 1], as a float (``variance`` checks its input)."""
        return float(self.variance(t))


@dataclass(frozen=True, kw_only=True)
class DuchiRandomizer(ScalarRandomizer):
    @cached_property  # read by every draw; the randomizer is frozen, so once (as PiecewiseRandomizer's)
    def bound(self) -> float:
        return 1 + self.bound_excess  # (e^ε+1)/(e^ε−1)

    @cached_property
    def bound_excess(self) -> float:
        """C − 1 = 2/(e^ε − 1), computed without cancellation or overflow."""
        return 2 * _inverse_expm1(self.epsilon)

    def probability_positive(self, t: np.ndarray | float) -> np.ndarray:
        """P(t̂ = +C | t) = ½ + t·(e^ε−1)/(2(e^ε+1))."""
        return 0.5 + _signed(t) / (2 * self.bound)

    def sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        positive = rng.random(np.shape(t)) < self.probability_positive(t)
        return np.where(positive, self.bound, -self.bound)

    def variance(self, t: np.ndarray | float) -> np.ndarray:
        return self.bound**2 - _signed(t) ** 2


@dataclass(frozen=True, kw_only=True)
class PiecewiseRandomizer(ScalarRandomizer):
    # bound, bound_excess and p_center are read by every draw (twice for the bound): computed once per randomizer,
    # which is frozen and reused by its mechanism across requests
    @cached_property
    def bound(self) -> float:
        return 1 + self.bound_excess  # (s+1)/(s−1)

    @cached_property
    def bound_excess(self) -> float:
        """C − 1 = 2/(s − 1), the length of the high-density piece, without cancellation or overflow."""
        return 2 * _inverse_expm1(self.epsilon / 2)

    @property
    def densities(self) -> tuple[float, float]:
        """(low, high): the output density on [−C, C] outside and inside [l(t), r(t)]; high/low = s² = e^ε.

        low = (s − 1)/(2s(s + 1)) and high = s(s − 1)/(2(s + 1)), written so that neither
        overflows for ε up to EPSILON_MAX (s·(s − 1) alone would, above ε ≈ 709).
        """
        half = self.epsilon / 2
        one_minus_inverse = -math.expm1(-half)  # 1 − 1/s
        return one_minus_inverse / (2 * (math.exp(half) + 1)), math.expm1(half) / (2 * (1 + math.exp(-half)))

    @cached_property
    def p_center(self) -> float:
        """Probability s/(s+1) of landing in the high-density piece [l(t), r(t)]."""
        return 1.0 / (1.0 + math.exp(-self.epsilon / 2))

    def interval(self, t: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """The high-density piece [l(t), r(t)], of length C − 1."""
        c = self.bound
        left = (c + 1) / 2 * _signed(t) - (c - 1) / 2
        return left, left + c - 1

    def sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        c = self.bound
        left, right = self.interval(t)
        shape = np.shape(t)
        center = rng.random(shape) < self.p_center
        inside = left + (right - left) * rng.random(shape)
        # Uniform on [−C, l) ∪ (r, C], total length (l + C) + (C − r) = C + 1.
        u = (c + 1) * rng.random(shape)
        outside = np.where(u < left + c, u - c, right + (u - (left + c)))
        return stochastic_round(np.where(center, inside, outside), grid=RELEASE_GRID, rng=rng)

    @cached_property
    def _inverse(self) -> float:
        """1/(s − 1), overflow-free: what the variance is read from (once per randomizer)."""
        return _inverse_expm1(self.epsilon / 2)

    def variance(self, t: np.ndarray | float) -> np.ndarray:
        """Closed form of the continuous PM; the release rounding adds at most RELEASE_GRID²/4 ≈ 2e-13."""
        return self._variance(_signed(t))

    def variance_at(self, t: float) -> float:
        return float(self._variance(t))  # the same arithmetic as ``variance``, on a float, unchecked

    def _variance(self, t: _T) -> _T:
        inverse = self._inverse  # t²/(s−1) + (s+3)/(3(s−1)²)
        return t * t * inverse + inverse / 3 + 4 * inverse**2 / 3


@dataclass(frozen=True, kw_only=True)
class HybridRandomizer(ScalarRandomizer):
    @property
    def piecewise(self) -> PiecewiseRandomizer:
        return PiecewiseRandomizer(epsilon=self.epsilon)

    @property
    def duchi(self) -> DuchiRandomizer:
        return DuchiRandomizer(epsilon=self.epsilon)

    @property
    def alpha(self) -> float:
        """Probability of using PM: 1 − e^{−ε/2} above ε*, else 0."""
        return -math.expm1(-self.epsilon / 2) if self.epsilon > HYBRID_THRESHOLD else 0.0

    @property
    def bound(self) -> float:
        return self.piecewise.bound if self.alpha > 0 else self.duchi.bound

    def sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        use_pm = rng.random(np.shape(t)) < self.alpha
        return np.where(use_pm, self.piecewise.sample(t, rng), self.duchi.sample(t, rng))

    def variance(self, t: np.ndarray | float) -> np.ndarray:
        a = self.alpha
        return a * self.piecewise.variance(t) + (1 - a) * self.duchi.variance(t)


@dataclass(frozen=True, kw_only=True)
class BoundedMechanism(Mechanism):
    """ε-LDP release of up to ``dimension`` values in [0, 1], ε/dimension per value, unbiased unless clipped."""

    epsilon: float
    dimension: int
    clip_output: bool = False
    name: str = field(default="bounded", init=False)

    def __post_init__(self) -> None:
        check_dimension(self.dimension)
        check_split(epsilon=self.epsilon, sensitivity=self.dimension)
        if not isinstance(self.clip_output, bool):
            raise ValueError(f"clip_output must be a bool, got {self.clip_output!r}")

    @classmethod
    def for_request(cls, *, epsilon: Epsilon, delta: float, dimension: int) -> Self:
        return cls(epsilon=epsilon, dimension=dimension)  # pure ε-DP: δ is not used

    @classmethod
    def from_description(cls, description: Mapping[str, object]) -> Self:
        return cls(
            epsilon=described_number(description, "epsilon"), dimension=described_dimension(description),
            clip_output=bool(description.get("clip_output", False)),
        )

    @abstractmethod
    def _randomizer(self, epsilon: float) -> ScalarRandomizer: ...

    @property
    def epsilon_per_coordinate(self) -> float:
        return self.epsilon / self.dimension

    @cached_property  # built once per mechanism (the registry reuses mechanisms across requests)
    def randomizer(self) -> ScalarRandomizer:
        """The scalar randomizer applied to each concept, at ε/dimension."""
        return self._randomizer(self.epsilon_per_coordinate)

    @property
    def output_range(self) -> tuple[float, float]:
        """Where released values lie: [(1 − C)/2, (1 + C)/2], or [0, 1] when clipped."""
        if self.clip_output:
            return 0.0, 1.0
        c = self.randomizer.bound
        return (1 - c) / 2, (1 + c) / 2

    def variance(self, x: np.ndarray | float) -> np.ndarray:
        """Var[x̂ | x] = Var[t̂ | t = 2x − 1]/4 of the unclipped estimator (bounds the MSE when clipped)."""
        x = np.asarray(x, dtype=np.float64)
        if np.any(np.isnan(x)) or np.any((x < 0) | (x > 1)):
            raise ValueError("x must lie in [0, 1]")
        return self.randomizer.variance(2 * x - 1) / 4

    def variance_at(self, x: float) -> float:
        """:meth:`variance` of one ``x`` the caller knows lies in [0, 1], as a float (no checks: a hot path)."""
        return self.randomizer.variance_at(2 * x - 1) / 4

    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        keys = list(values)
        return {k: float(v) for k, v in zip(keys, self.release(self.checked(keys, values), rng))}

    def checked(self, keys: list[str], values: Mapping[str, float]) -> np.ndarray:
        """``values`` in ``keys``' order, refused (``ValueError``) beyond ``dimension`` or when not finite, and
        clamped to [0, 1] (clamping to the domain is part of the mechanism's input map)."""
        if len(keys) > self.dimension:
            raise ValueError(f"{len(keys)} values exceed dimension={self.dimension} the budget is split over")
        x = np.array([values[k] for k in keys], dtype=np.float64)
        if not np.isfinite(x).all():  # the array's own methods: no wrapper on this per-answer path
            raise ValueError("values must be finite")
        return x.clip(0.0, 1.0)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The released values of ``x``, already :meth:`checked`: one report per value at ε/dimension."""
        released = (self.randomizer.sample(2 * x - 1, rng) + 1) / 2
        return np.clip(released, 0.0, 1.0) if self.clip_output else released

    def describe(self) -> dict[str, object]:
        return dict(self._description)  # a copy: callers may add to it

    def charge(self) -> ReleaseCost:
        return ReleaseCost(epsilon=float(self.epsilon), delta=0.0, mechanism=self.name)

    @property
    def noise_sd(self) -> float:
        """The worst-case sd of one released value x̂ (unclipped)."""
        return math.sqrt(self.randomizer.worst_case_variance()) / 2

    @cached_property
    def _description(self) -> dict[str, object]:
        low, high = self.output_range
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "sensitivity": float(self.dimension),  # L1 sensitivity of `dimension` values in [0, 1]
            "noise_scale": self.noise_sd,  # worst-case sd of x̂
            "dimension": self.dimension,
            "epsilon_per_coordinate": self.epsilon_per_coordinate,
            "output_range": [low, high],
            "clip_output": self.clip_output,
            "unbiased": not self.clip_output,
        }


@dataclass(frozen=True, kw_only=True)
class DuchiMechanism(BoundedMechanism):
    name: str = field(default="duchi", init=False)

    def _randomizer(self, epsilon: float) -> ScalarRandomizer:
        return DuchiRandomizer(epsilon=epsilon)

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # P(+) is linear in t, so the entity error enters exactly through E[clip(x + e, 0, 1)].
        return DuchiKernel(DuchiRandomizer(epsilon=self.epsilon_per_coordinate), entity_error_sd, self.clip_output)


@dataclass(frozen=True, kw_only=True)
class PiecewiseMechanism(BoundedMechanism):
    name: str = field(default="piecewise", init=False)

    def _randomizer(self, epsilon: float) -> ScalarRandomizer:
        return PiecewiseRandomizer(epsilon=epsilon)

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # The piecewise-constant density averaged exactly over the clamped clean answer; the release rounding
        # is ignored (treated as a density) but widens the support by one grid step.
        return PiecewiseKernel(
            PiecewiseRandomizer(epsilon=self.epsilon_per_coordinate), entity_error_sd, self.clip_output, RELEASE_GRID
        )


@dataclass(frozen=True, kw_only=True)
class HybridMechanism(BoundedMechanism):
    name: str = field(default="hybrid", init=False)

    def _randomizer(self, epsilon: float) -> ScalarRandomizer:
        return HybridRandomizer(epsilon=epsilon)

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # PM with probability α, Duchi otherwise: a report on one of Duchi's two values is a Duchi point mass.
        return HybridKernel(
            HybridRandomizer(epsilon=self.epsilon_per_coordinate), entity_error_sd, self.clip_output, RELEASE_GRID
        )
