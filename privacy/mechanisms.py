"""Local differential privacy mechanisms for an entity's mastery vector.

The paper's Algorithm 1: each entity's prediction ŷ ∈ [0,1]^K is released as
clip(ŷ + η, 0, 1) with η_k ~ Laplace(Δ/ε) independently per concept. Changing the
student can move each of the K coordinates by at most 1, so the L1 sensitivity of the
vector is Δ = K (the paper's default). We also offer Δ = the number of concepts actually
assessed in the request, since only those are released. Clipping is post-processing and
costs no privacy.

Mechanisms are small pure objects: validated in ``__init__``, given a
``numpy.random.Generator`` for every draw, no I/O. ``make_rng`` seeds a generator from the
OS CSPRNG unless a seed is injected (tests only).

A mechanism is one type from end to end: it owns its noise (:meth:`Mechanism.privatize`), its
public parameters (:meth:`~Mechanism.describe`, and :meth:`~Mechanism.from_description` back),
what a release costs (:meth:`~Mechanism.charge`) and the likelihood of its reports for the
posterior (:meth:`~Mechanism.likelihood`). Only :mod:`privacy.registry` reads a mechanism's name.
"""

from __future__ import annotations

import math
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import ClassVar, Literal

import numpy as np

from privacy.likelihood import ClippedAdditiveKernel, ExactKernel, GaussianNoise, LikelihoodKernel, laplace_with_error
from privacy.ranges import MAX_RELEASE_EPSILON, NOISE_MULTIPLIER_RANGE, Epsilon, check_split

__all__ = [
    "LaplaceMechanism",
    "Mechanism",
    "NoNoise",
    "ReleaseCost",
    "SensitivityMode",
    "described_dimension",
    "described_number",
    "laplace_for_request",
    "make_rng",
    "sensitivity_for",
]

SensitivityMode = Literal["paper", "assessed"]


def make_rng(seed: int | None = None) -> np.random.Generator:
    """A fresh generator; seeded from the OS CSPRNG (``secrets``) unless ``seed`` is given."""
    return np.random.default_rng(secrets.randbits(128) if seed is None else seed)


def sensitivity_for(mode: SensitivityMode, *, n_concepts_total: int, n_concepts_assessed: int) -> float:
    """L1 sensitivity Δ of a mastery vector with values in [0, 1]."""
    if mode == "paper":
        return float(n_concepts_total)
    if mode == "assessed":
        return float(n_concepts_assessed)
    raise ValueError(f"unknown sensitivity mode {mode!r} (use 'paper' or 'assessed')")


def _finite(value: object, name: str) -> float:
    if type(value) is float and math.isfinite(value):  # the common case, first: a ledger replays every release
        return value
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ReleaseCost:
    """What one release costs: the one value a privacy accountant steps by and the ledger charges.

    ``epsilon`` is what the release really costs (the snapping mechanism's effective ε, slightly above
    its nominal one); ``mechanism`` is the name the accountant composes by; ``sigma_over_sensitivity``
    (σ/Δ₂, the Gaussian only) lets an RDP accountant compose it tightly.

    Checked once, here (``ValueError``), and carried from then on: ε finite in (0, MAX_RELEASE_EPSILON] (a
    release, not a request: an accountant replays histories charged under earlier versions), δ in [0, 1), σ/Δ₂ in
    NOISE_MULTIPLIER_RANGE. Numbers are stored as floats.
    """

    epsilon: float
    delta: float
    mechanism: str
    sigma_over_sensitivity: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, str) or not self.mechanism:
            raise ValueError(f"mechanism must be a non-empty name, got {self.mechanism!r}")
        epsilon, delta = _finite(self.epsilon, "epsilon"), _finite(self.delta, "delta")
        if not 0 < epsilon <= MAX_RELEASE_EPSILON:
            raise ValueError(f"epsilon of one release must lie in (0, {MAX_RELEASE_EPSILON:g}], got {epsilon!r}")
        if not (0.0 <= delta < 1.0):
            raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
        multiplier = self.sigma_over_sensitivity
        if multiplier is not None:
            multiplier = _finite(multiplier, "sigma_over_sensitivity")
            low, high = NOISE_MULTIPLIER_RANGE
            if not low <= multiplier <= high:
                raise ValueError(f"sigma_over_sensitivity must lie in [{low:g}, {high:g}], got {multiplier!r}")
        for name, value in (("epsilon", epsilon), ("delta", delta), ("sigma_over_sensitivity", multiplier)):
            if value is not getattr(self, name):  # stored as floats (an int or a numpy float given)
                object.__setattr__(self, name, value)


def described_number(description: Mapping[str, object], key: str) -> float:
    """``description[key]`` as a float, or a ``ValueError`` naming the key (for :meth:`Mechanism.from_description`)."""
    value = description.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        # a stored description is data, not a caller's bug: a ValueError, as for any other bad parameter
        raise ValueError(f"mechanism description {dict(description)!r} lacks a numeric {key!r}")  # noqa: TRY004
    return float(value)


def described_dimension(description: Mapping[str, object]) -> int:
    """``description["dimension"]`` as an int (how many concepts a bounded release splits ε over), or a
    ``ValueError``."""
    dimension = described_number(description, "dimension")
    if not dimension.is_integer():
        raise ValueError(f"mechanism description needs an integer 'dimension', got {dimension!r}")
    return int(dimension)


class Mechanism(ABC):
    """Releases a privatized copy of an entity's per-concept values, and knows what that release means.

    Built by :func:`privacy.mechanism_for_request` for a request (once per parameters: mechanisms are
    frozen, hashable and reused), or rebuilt by :func:`privacy.mechanism_from_description` from a stored
    :meth:`describe`.
    """

    name: str
    adds_noise: ClassVar[bool] = True  # False only for NoNoise: the release is the value itself

    @classmethod
    @abstractmethod
    def for_request(cls, *, epsilon: Epsilon, delta: float, dimension: int) -> Mechanism:
        """This mechanism for one request: ε (δ where it uses one) over ``dimension`` concepts (the budget's Δ)."""

    @classmethod
    @abstractmethod
    def from_description(cls, description: Mapping[str, object]) -> Mechanism:
        """The mechanism :meth:`describe` described (a stored record, JSON); ``ValueError`` when it cannot be."""

    @abstractmethod
    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]: ...

    @abstractmethod
    def describe(self) -> dict[str, object]:
        """The public parameters of the mechanism (what a response's privacy block shows)."""

    @abstractmethod
    def charge(self) -> ReleaseCost:
        """What one release costs; ``ValueError`` when it cannot be charged (no noise)."""

    @abstractmethod
    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        """log p(report | x) of this mechanism's reports about an entity whose clean answer is x + N(0, τ²),
        τ = ``entity_error_sd`` ≥ 0: what Bayes post-processing needs of the mechanism."""

    @property
    @abstractmethod
    def noise_sd(self) -> float:
        """The sd of the noise on one released value (worst case over inputs where it depends on them)."""


@dataclass(frozen=True, kw_only=True)
class NoNoise(Mechanism):
    """The request asked for no privacy: values pass unchanged. ε is infinite."""

    name: str = field(default="none", init=False)
    adds_noise: ClassVar[bool] = False

    @classmethod
    def for_request(cls, *, epsilon: Epsilon, delta: float, dimension: int) -> NoNoise:
        return cls()

    @classmethod
    def from_description(cls, description: Mapping[str, object]) -> NoNoise:
        return cls()

    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        return dict(values)

    def describe(self) -> dict[str, object]:
        return {"mechanism": self.name, "epsilon": None, "sensitivity": None, "noise_scale": 0.0}

    def charge(self) -> ReleaseCost:
        raise ValueError("a release without noise has unbounded privacy cost and cannot be charged")

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # r = u. With τ = 0 the report *is* x (a point mass); otherwise the Gaussian case with σ = 0 (the
        # answer's own clip to [0, 1] gives the point masses).
        if entity_error_sd == 0:
            return ExactKernel()
        return ClippedAdditiveKernel(GaussianNoise(entity_error_sd), self.name)

    @property
    def noise_sd(self) -> float:
        return 0.0


@dataclass(frozen=True, kw_only=True)
class LaplaceMechanism(Mechanism):
    """ε-LDP Laplace mechanism with L1 sensitivity ``sensitivity``, output clipped to [lower, upper].

    Total for ε/Δ in [COORDINATE_EPSILON_MIN, EPSILON_MAX] and 0 < Δ ≤ DIMENSION_MAX
    (:func:`privacy.ranges.check_split`): the scale Δ/ε is then at most 10⁹.
    """

    epsilon: float
    sensitivity: float
    lower: float = 0.0
    upper: float = 1.0
    name: str = field(default="laplace", init=False)

    def __post_init__(self) -> None:
        check_split(epsilon=self.epsilon, sensitivity=self.sensitivity)
        if not (math.isfinite(self.lower) and math.isfinite(self.upper) and self.lower < self.upper):
            raise ValueError(f"lower must be < upper, got [{self.lower}, {self.upper}]")

    @property
    def scale(self) -> float:
        """The Laplace scale b = Δ / ε (standard deviation √2·b)."""
        return self.sensitivity / self.epsilon

    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        keys = list(values)
        x = np.array([values[k] for k in keys], dtype=float)
        if not np.all(np.isfinite(x)):
            raise ValueError("values must be finite")
        noisy = np.clip(x + rng.laplace(0.0, self.scale, size=len(keys)), self.lower, self.upper)
        return {k: float(v) for k, v in zip(keys, noisy)}

    def describe(self) -> dict[str, object]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "sensitivity": self.sensitivity,
            "noise_scale": self.scale,
        }

    @classmethod
    def for_request(cls, *, epsilon: Epsilon, delta: float, dimension: int) -> LaplaceMechanism:
        return cls(epsilon=epsilon, sensitivity=float(dimension))  # pure ε-DP: δ is not used

    @classmethod
    def from_description(cls, description: Mapping[str, object]) -> LaplaceMechanism:
        # lower/upper are not described: a mechanism built for a request always releases on [0, 1]
        return cls(
            epsilon=described_number(description, "epsilon"), sensitivity=described_number(description, "sensitivity")
        )

    def charge(self) -> ReleaseCost:
        return ReleaseCost(epsilon=float(self.epsilon), delta=0.0, mechanism=self.name)

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # r = clip(u + Lap(b), 0, 1): the normal-Laplace density inside (0, 1), point masses at 0 and 1. Exact:
        # the Laplace mechanism does not clamp its input.
        return ClippedAdditiveKernel(laplace_with_error(self.scale, entity_error_sd), self.name)

    @property
    def noise_sd(self) -> float:
        return self.scale * math.sqrt(2)


def laplace_for_request(
    *, epsilon: float | None, mode: SensitivityMode, n_concepts_total: int, n_concepts_assessed: int
) -> Mechanism:
    """The paper's mechanism for one request; ``epsilon=None`` means the request asked for no noise."""
    if epsilon is None:
        return NoNoise()
    epsilon = Epsilon(epsilon)
    delta = sensitivity_for(mode, n_concepts_total=n_concepts_total, n_concepts_assessed=n_concepts_assessed)
    return LaplaceMechanism(epsilon=epsilon, sensitivity=delta)
