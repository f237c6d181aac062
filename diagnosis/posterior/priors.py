"""The Beta prior on a concept's mastery and the calibration-split fits (prior shapes, entity error sd)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betainc

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
    When a shape would fall below ``min_shape`` (variance at or above m(1 − m), e.g. binary truth)
    the concentration is raised until the smaller shape equals ``min_shape``, keeping the mean m:
    a U-shaped prior that still says how common mastery is (a floor of Beta(½, ½) for every such
    concept would pull every estimate towards ½). Constant values give the cap. Fewer than two values: uniform.
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
    if not c > 0 or min(m, 1 - m) * c < min_shape:
        floor = min_shape / min(m, 1 - m)  # the concentration at which the smaller shape is min_shape
        return BetaPrior(float(min(m * floor, max_shape)), float(min((1 - m) * floor, max_shape)))
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
