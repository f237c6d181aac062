"""Aggregation of the entities' (privatized) predictions: the paper's residual-corrected mean and
stacking (Bayes post-processing is :mod:`diagnosis.posterior`). Every aggregator is an
:class:`Aggregator`; its parameters come from a calibration (``calibration`` builds them).

The paper's rule, per concept k over the M_k entities that answered it:

    y_k = 1/M_k · Σ_j (ŷ_jk − α · r_jk),   α = 0.3 by default,

with residuals r_j taken from a calibration record (zero when there is none), and the
result clipped to [0, 1] (the correction can push a value outside).

**The paper's residuals are a no-op.** The paper computes r_j = E[ŷ_j − ȳ] with ȳ the
cross-entity mean. For every student Σ_j (ŷ_j − ȳ) = 0, so Σ_j r_j = 0 and the
correction term α/M · Σ_j r_j vanishes: with equal weights the "corrected" average is
the plain average. ``paper_residuals`` computes them so a test can show exactly that;
the ``bias`` calibration uses truth-referenced residuals (r_j = E[ŷ_j − y]) instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from diagnosis.calibrated import CalibrationTag
from diagnosis.measured import MeasuredError
from privacy import Mechanism, NoNoise

__all__ = [
    "DEFAULT_ALPHA",
    "NO_NOISE",
    "Aggregation",
    "Aggregator",
    "ResidualAggregator",
    "StackingAggregator",
    "answered_by",
    "apply_isotonic",
    "paper_residuals",
    "residual_aggregate",
    "stacked_aggregate",
]

DEFAULT_ALPHA = 0.3

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> value in [0, 1]
NO_NOISE: Mechanism = NoNoise()  # what raw (unprivatized) answers were "released" through


@dataclass(frozen=True)
class Aggregation:
    """Aggregated mastery per concept, and the concepts no entity answered.

    ``intervals`` (concept -> (lower, upper)) and ``level`` are the credible intervals of
    aggregators that have them (Bayes post-processing); a mean has none (empty, ``None``) — the pipeline adds a
    calibrated mean's measured ones afterwards (:mod:`diagnosis.measured`).
    """

    mastery: dict[str, float]
    missing: list[str]
    contributors: dict[str, list[str]]  # concept -> entities whose values were combined
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    level: float | None = None


def answered_by(predictions: Predictions, concepts: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """(concept -> entities that answered it, concepts nobody answered): what every aggregator starts from."""
    contributors: dict[str, list[str]] = {}
    missing: list[str] = []
    for concept in concepts:
        names = [name for name, values in predictions.items() if concept in values]
        if names:
            contributors[concept] = names
        else:
            missing.append(concept)
    return contributors, missing


def residual_aggregate(
    predictions: Predictions,
    concepts: Sequence[str],
    *,
    residuals: Mapping[str, Mapping[str, float]] | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> Aggregation:
    """The paper's aggregation over the entities that answered each concept."""
    residuals = residuals or {}
    contributors, missing = answered_by(predictions, concepts)
    mastery = {
        concept: float(np.clip(np.mean([predictions[n][concept] - alpha * residuals.get(n, {}).get(concept, 0.0) for n in names]), 0.0, 1.0))
        for concept, names in contributors.items()
    }
    return Aggregation(mastery=mastery, missing=missing, contributors=contributors)


def paper_residuals(per_student: Sequence[Predictions]) -> dict[str, dict[str, float]]:
    """The paper's r_jk = E_students[ŷ_jk − ȳ_k], ȳ_k the cross-entity mean for that student.

    Only students for which every entity answered concept k contribute to r_·k, so the
    identity Σ_j r_jk = 0 holds exactly (see the module docstring).
    """
    sums: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for predictions in per_student:
        entities = list(predictions)
        concepts = set.intersection(*(set(v) for v in predictions.values())) if entities else set()
        for concept in concepts:
            mean = float(np.mean([predictions[e][concept] for e in entities]))
            counts[concept] = counts.get(concept, 0) + 1
            for e in entities:
                sums.setdefault(e, {}).setdefault(concept, 0.0)
                sums[e][concept] += predictions[e][concept] - mean
    return {e: {c: s / counts[c] for c, s in by_c.items()} for e, by_c in sums.items()}


class Aggregator(ABC):
    """Combines the entities' privatized predictions into one diagnosis.

    ``kind`` says what the result is (a ``mean`` of the answers, or a ``posterior`` estimate with
    credible intervals); ``calibration`` names the calibration applied and the noise it was fitted at.
    """

    kind: ClassVar[Literal["mean", "posterior"]] = "mean"
    # A mean's error measured on held-out validation students (diagnosis.measured), where its calibration measured
    # one: the pipeline turns it into intervals with the request's answer counts. None: a mean serves no interval.
    measured_error: MeasuredError | None = None

    def __init__(self, *, calibration: CalibrationTag | None = None) -> None:
        self.calibration = calibration

    @property
    def calibration_id(self) -> str | None:
        return self.calibration.id if self.calibration else None

    @property
    def reads_uncertainty(self) -> bool:
        """Whether :meth:`aggregate` weighs an answer by the entity's own uncertainty: a posterior does; a mean
        (plain, residual, stacking) reads the values alone."""
        return self.kind == "posterior"

    @abstractmethod
    def aggregate(
        self, predictions: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Aggregation:
        """``mechanism``: the mechanism the predictions were released through (``NO_NOISE`` for raw
        answers); a mean ignores it, Bayes post-processing models its likelihood."""


def apply_isotonic(
    predictions: Predictions, isotonic: Mapping[str, Mapping[str, Sequence[Sequence[float]]]]
) -> dict[str, dict[str, float]]:
    """Map each entity's value through its fitted monotone (isotonic) curve, where one was fitted."""
    out: dict[str, dict[str, float]] = {}
    for entity, values in predictions.items():
        maps = isotonic.get(entity, {})
        out[entity] = {
            c: float(np.interp(v, maps[c][0], maps[c][1])) if c in maps else float(v) for c, v in values.items()
        }
    return out


# A fitted weight below this is a zero (NNLS leaves ~1e-16 for members it drops): scaling one of those up to the
# fitted total would multiply its answer by ~1e16.
NEGLIGIBLE_WEIGHT = 1e-6


def _stack(values: Mapping[str, float], weights: Mapping[str, float], intercept: float) -> float:
    """b + Σ_j w'_j ŷ_j over the entities that answered, the weights of those present scaled up to the fitted total;
    when only members of negligible weight answered, the intercept alone (they carry no fitted information)."""
    kept = {n: w for n, w in weights.items() if w >= NEGLIGIBLE_WEIGHT}
    total = sum(kept.values())
    available = sum(kept.get(n, 0.0) for n in values)
    weights = kept
    scale = total / available if available > 0 else 0.0
    return float(np.clip(intercept + sum(scale * weights.get(n, 0.0) * v for n, v in values.items()), 0.0, 1.0))


def stacked_aggregate(
    predictions: Predictions,
    concepts: Sequence[str],
    *,
    weights: Mapping[str, Mapping[str, float]],
    intercepts: Mapping[str, float],
    isotonic: Mapping[str, Mapping[str, Sequence[Sequence[float]]]] | None = None,
    pooled_weights: Mapping[str, float] | None = None,
    pooled_intercept: float = 0.0,
) -> Aggregation:
    """y_k = b_k + Σ_j w'_jk ŷ_jk over the entities that answered k, clipped to [0, 1].

    When some weighted entities did not answer, the weights of those that did are scaled
    up so they keep the fitted total weight (renormalisation). A concept with no weights of
    its own (too few validation students) uses the weights pooled over all concepts, and
    without those the plain mean; the calibration's notes say which concepts.
    """
    if isotonic:
        predictions = apply_isotonic(predictions, isotonic)
    mastery: dict[str, float] = {}
    contributors, missing = answered_by(predictions, concepts)
    for concept, names in contributors.items():
        values = {n: predictions[n][concept] for n in names}
        if weights.get(concept):
            mastery[concept] = _stack(values, weights[concept], intercepts.get(concept, 0.0))
        elif pooled_weights:
            mastery[concept] = _stack(values, pooled_weights, pooled_intercept)
        else:
            mastery[concept] = float(np.clip(np.mean(list(values.values())), 0.0, 1.0))
    return Aggregation(mastery=mastery, missing=missing, contributors=contributors)


class ResidualAggregator(Aggregator):
    """The paper's residual-corrected mean (no residuals: the plain mean)."""

    def __init__(
        self,
        *,
        residuals: Mapping[str, Mapping[str, float]] | None = None,
        alpha: float = DEFAULT_ALPHA,
        calibration: CalibrationTag | None = None,
    ) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError("alpha must be in [0, 1]")
        super().__init__(calibration=calibration)
        self.residuals = {e: dict(v) for e, v in (residuals or {}).items()}
        self.alpha = alpha

    def aggregate(
        self, predictions: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Aggregation:
        return residual_aggregate(predictions, concepts, residuals=self.residuals, alpha=self.alpha)


class StackingAggregator(Aggregator):
    """Per-concept non-negative entity weights plus an intercept, fitted on a validation split."""

    def __init__(
        self,
        *,
        weights: Mapping[str, Mapping[str, float]],
        intercepts: Mapping[str, float],
        isotonic: Mapping[str, Mapping[str, Sequence[Sequence[float]]]] | None = None,
        pooled_weights: Mapping[str, float] | None = None,
        pooled_intercept: float = 0.0,
        calibration: CalibrationTag | None = None,
    ) -> None:
        super().__init__(calibration=calibration)
        self.weights, self.intercepts = weights, intercepts
        self.isotonic = isotonic or {}
        self.pooled_weights, self.pooled_intercept = pooled_weights or {}, pooled_intercept

    def aggregate(
        self, predictions: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Aggregation:
        return stacked_aggregate(
            predictions, concepts, weights=self.weights, intercepts=self.intercepts, isotonic=self.isotonic,
            pooled_weights=self.pooled_weights, pooled_intercept=self.pooled_intercept,
        )
