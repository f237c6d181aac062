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
    "Aggregation",
    "Aggregator",
    "CalibrationRecord",
    "ResidualAggregator",
    "paper_residuals",
    "residual_aggregate",
]

DEFAULT_ALPHA = 0.3

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> value in [0, 1]


@dataclass(frozen=True, kw_only=True)
class CalibrationRecord:
    """Fitted aggregation parameters for one Q-matrix: α and residuals per entity and concept."""

    id: str
    qmatrix_id: str
    alpha: float = DEFAULT_ALPHA
    residuals: dict[str, dict[str, float]] = field(default_factory=dict)
    method: str = "paper"
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def residual(self, entity: str, concept: str) -> float:
        return self.residuals.get(entity, {}).get(concept, 0.0)


@dataclass(frozen=True)
class Aggregation:
    """Aggregated mastery per concept, and the concepts no entity answered."""

    mastery: dict[str, float]
    missing: list[str]
    contributors: dict[str, list[str]]  # concept -> entities whose values were averaged


def residual_aggregate(
    predictions: Predictions,
    concepts: Sequence[str],
    *,
    residuals: Mapping[str, Mapping[str, float]] | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> Aggregation:
    """The paper's aggregation over the entities that answered each concept."""
    residuals = residuals or {}
    mastery: dict[str, float] = {}
    missing: list[str] = []
    contributors: dict[str, list[str]] = {}
    for concept in concepts:
        names = [name for name, values in predictions.items() if concept in values]
        if not names:
            missing.append(concept)
            continue
        corrected = [predictions[n][concept] - alpha * residuals.get(n, {}).get(concept, 0.0) for n in names]
        mastery[concept] = float(np.clip(np.mean(corrected), 0.0, 1.0))
        contributors[concept] = names
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
