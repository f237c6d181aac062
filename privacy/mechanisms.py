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
"""

from __future__ import annotations

import math
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privacy.ranges import check_epsilon, check_split

__all__ = [
    "LaplaceMechanism",
    "Mechanism",
    "NoNoise",
    "SensitivityMode",
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


class Mechanism(ABC):
    """Releases a privatized copy of an entity's per-concept values."""

    name: str

    @abstractmethod
    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]: ...

    @abstractmethod
    def describe(self) -> dict[str, object]:
        """The public parameters of the mechanism (what a response's privacy block shows)."""


@dataclass(frozen=True, kw_only=True)
class NoNoise(Mechanism):
    """The request asked for no privacy: values pass unchanged. ε is infinite."""

    name: str = field(default="none", init=False)

    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        return dict(values)

    def describe(self) -> dict[str, object]:
        return {"mechanism": self.name, "epsilon": None, "sensitivity": None, "noise_scale": 0.0}


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


def laplace_for_request(
    *, epsilon: float | None, mode: SensitivityMode, n_concepts_total: int, n_concepts_assessed: int
) -> Mechanism:
    """The paper's mechanism for one request; ``epsilon=None`` means the request asked for no noise."""
    if epsilon is None:
        return NoNoise()
    check_epsilon(epsilon)
    delta = sensitivity_for(mode, n_concepts_total=n_concepts_total, n_concepts_assessed=n_concepts_assessed)
    return LaplaceMechanism(epsilon=epsilon, sensitivity=delta)
