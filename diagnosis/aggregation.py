"""Residual-corrected aggregation of the entities' (privatized) predictions.

The paper's rule, per concept k over the M_k entities that answered it:

    y_k = 1/M_k · Σ_j (ŷ_jk − α · r_jk),   α = 0.3 by default,

with residuals r_j taken from a calibration record (zero when there is none), and the
result clipped to [0, 1] (the correction can push a value outside).

**The paper's residuals are a no-op.** The paper computes r_j = E[ŷ_j − ȳ] with ȳ the
cross-entity mean. For every student Σ_j (ŷ_j − ȳ) = 0, so Σ_j r_j = 0 and the
correction term α/M · Σ_j r_j vanishes: with equal weights the "corrected" average is
the plain average. ``paper_residuals`` computes them so a test can show exactly that;
the calibration issue brings truth-referenced residuals (r_j = E[ŷ_j − y]).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_ENTITY_ERROR_SD",
    "Aggregation",
    "Aggregator",
    "CalibrationRecord",
    "ResidualAggregator",
    "StackingAggregator",
    "aggregator_for",
    "answered_by",
    "apply_isotonic",
    "paper_residuals",
    "residual_aggregate",
    "stacked_aggregate",
]

DEFAULT_ALPHA = 0.3

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> value in [0, 1]


@dataclass(frozen=True, kw_only=True)
class CalibrationRecord:
    """Fitted aggregation parameters for one Q-matrix and one noise level.

    ``method`` says which fields matter: ``paper`` and ``bias`` use ``alpha`` and
    ``residuals`` (entity -> concept -> r); ``stacking`` uses ``weights`` (concept ->
    entity -> w ≥ 0) and ``intercepts`` (concept -> b). ``epsilon`` is the noise level the
    validation answers were privatized at (None: no noise). ``version`` counts the
    calibrations fitted for the same Q-matrix.
    """

    id: str
    qmatrix_id: str
    method: str = "paper"
    alpha: float = DEFAULT_ALPHA
    residuals: dict[str, dict[str, float]] = field(default_factory=dict)
    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    intercepts: dict[str, float] = field(default_factory=dict)
    # stacking with isotonic maps: entity -> concept -> [[x knots], [y knots]], applied before the weights
    isotonic: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    priors: dict[str, list[float]] = field(default_factory=dict)  # posterior: concept -> [a, b] of a Beta prior
    entity_error_sd: dict[str, float] = field(default_factory=dict)  # posterior: entity -> τ of its clean answers
    entities: list[str] = field(default_factory=list)
    epsilon: float | None = None
    sensitivity: str = "paper"
    mechanism: str = "laplace"
    truth_source: str = "provided"
    n_students: int = 0
    version: int = 1
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def residual(self, entity: str, concept: str) -> float:
        return self.residuals.get(entity, {}).get(concept, 0.0)


@dataclass(frozen=True)
class Aggregation:
    """Aggregated mastery per concept, and the concepts no entity answered."""

    mastery: dict[str, float]
    missing: list[str]
    contributors: dict[str, list[str]]  # concept -> entities whose values were averaged


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
    """Combines the entities' privatized predictions into one diagnosis."""

    @abstractmethod
    def aggregate(self, predictions: Predictions, concepts: Sequence[str]) -> Aggregation: ...

    @property
    @abstractmethod
    def calibration_id(self) -> str | None: ...


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


def stacked_aggregate(
    predictions: Predictions,
    concepts: Sequence[str],
    *,
    weights: Mapping[str, Mapping[str, float]],
    intercepts: Mapping[str, float],
    isotonic: Mapping[str, Mapping[str, Sequence[Sequence[float]]]] | None = None,
) -> Aggregation:
    """y_k = b_k + Σ_j w'_jk ŷ_jk over the entities that answered k, clipped to [0, 1].

    When some weighted entities did not answer, the weights of those that did are scaled
    up so they keep the fitted total weight (renormalisation). A concept with no fitted
    weights (not in ``weights``) falls back to the plain mean, and that is recorded in the
    calibration's notes when it is fitted.
    """
    if isotonic:
        predictions = apply_isotonic(predictions, isotonic)
    mastery: dict[str, float] = {}
    contributors, missing = answered_by(predictions, concepts)
    for concept, names in contributors.items():
        w = weights.get(concept)
        if not w:
            mastery[concept] = float(np.clip(np.mean([predictions[n][concept] for n in names]), 0.0, 1.0))
            continue
        total = sum(w.values())
        available = sum(w.get(n, 0.0) for n in names)
        scale = total / available if available > 0 else 0.0
        value = intercepts.get(concept, 0.0) + sum(scale * w.get(n, 0.0) * predictions[n][concept] for n in names)
        mastery[concept] = float(np.clip(value, 0.0, 1.0))
    return Aggregation(mastery=mastery, missing=missing, contributors=contributors)


class ResidualAggregator(Aggregator):
    """The paper's residual-corrected mean, with residuals from ``record`` (none: plain mean)."""

    def __init__(self, record: CalibrationRecord | None = None, *, alpha: float = DEFAULT_ALPHA) -> None:
        if not 0.0 <= (record.alpha if record else alpha) <= 1.0:
            raise ValueError("alpha must be in [0, 1]")
        self.record = record
        self.alpha = record.alpha if record else alpha

    @property
    def calibration_id(self) -> str | None:
        return self.record.id if self.record else None

    def aggregate(self, predictions: Predictions, concepts: Sequence[str]) -> Aggregation:
        residuals = self.record.residuals if self.record else None
        return residual_aggregate(predictions, concepts, residuals=residuals, alpha=self.alpha)


class StackingAggregator(Aggregator):
    """Per-concept non-negative entity weights plus an intercept, fitted on a validation split."""

    def __init__(self, record: CalibrationRecord) -> None:
        if record.method != "stacking":
            raise ValueError(f"calibration {record.id} is '{record.method}', not 'stacking'")
        self.record = record

    @property
    def calibration_id(self) -> str | None:
        return self.record.id

    def aggregate(self, predictions: Predictions, concepts: Sequence[str]) -> Aggregation:
        return stacked_aggregate(
            predictions, concepts, weights=self.record.weights, intercepts=self.record.intercepts,
            isotonic=self.record.isotonic,
        )


DEFAULT_ENTITY_ERROR_SD = 0.1  # τ assumed for posterior aggregation where no posterior calibration fitted one


def aggregator_for(
    record: CalibrationRecord | None,
    *,
    alpha: float = DEFAULT_ALPHA,
    aggregation: str = "record",
    estimate: str = "mean",
    entities: Sequence[str] = (),
) -> Aggregator:
    """The aggregator for a request, given the calibration record that applies (or none).

    ``aggregation``: ``record`` — what the record describes (none: the uncorrected mean);
    ``auto`` — the same, but Bayes post-processing when there is no record; ``posterior`` —
    always Bayes post-processing (the record's priors and entity errors when it is a posterior
    record, else uniform priors and τ = ``DEFAULT_ENTITY_ERROR_SD`` for ``entities``); ``mean`` —
    the record's residual/stacking mean, or the plain mean when the record is a posterior one.
    """
    posterior_record = record is not None and record.method == "posterior"
    if aggregation == "posterior" or (aggregation == "auto" and (record is None or posterior_record)) or (
        aggregation == "record" and posterior_record
    ):
        from diagnosis.posterior import BetaPrior, PosteriorAggregator

        if record is not None and posterior_record:
            tau = {e: DEFAULT_ENTITY_ERROR_SD for e in entities} | record.entity_error_sd
            priors = {c: BetaPrior(a=ab[0], b=ab[1]) for c, ab in record.priors.items()}
            return PosteriorAggregator(priors=priors, entity_error_sd=tau, estimate=estimate, calibration_id=record.id)  # type: ignore[arg-type]
        return PosteriorAggregator(entity_error_sd={e: DEFAULT_ENTITY_ERROR_SD for e in entities}, estimate=estimate)  # type: ignore[arg-type]
    if record is None or posterior_record:
        return ResidualAggregator(alpha=alpha)
    if record.method == "stacking":
        return StackingAggregator(record)
    return ResidualAggregator(record)
