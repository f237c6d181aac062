"""A calibration record (one typed set of parameters and the noise it was fitted at), and the
aggregator a diagnosis gets from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from calibration.params import CalibrationParams, params_from_json
from diagnosis import DEFAULT_ALPHA, Aggregator, CalibrationTag, NoiseLevel, PosteriorAggregator, ResidualAggregator
from diagnosis.posterior import Estimate
from privacy import DEFAULT_DELTA

__all__ = ["AggregationMode", "CalibrationRecord", "aggregator_for"]

AggregationMode = Literal["record", "auto", "mean", "posterior"]

# Fields of records stored before parameters were typed (one flat record for every method).
_LEGACY_PARAMS = ("alpha", "residuals", "weights", "intercepts", "isotonic", "priors", "entity_error_sd")


@dataclass(frozen=True, kw_only=True)
class CalibrationRecord:
    """Fitted aggregation parameters for one Q-matrix and one noise level.

    ``params`` holds what the method fitted (its type is the method). ``epsilon``, ``mechanism``,
    ``sensitivity`` and ``delta`` are the noise level diagnoses are expected to use — the level the
    validation answers were privatized at (``epsilon`` None: no noise). ``version`` counts the
    calibrations fitted for the same Q-matrix.
    """

    id: str
    qmatrix_id: str
    params: CalibrationParams
    entities: list[str] = field(default_factory=list)
    epsilon: float | None = None
    sensitivity: str = "paper"
    mechanism: str = "none"
    delta: float = DEFAULT_DELTA
    truth_source: str = "provided"
    n_students: int = 0
    version: int = 1
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def method(self) -> str:
        return self.params.method

    @property
    def noise(self) -> NoiseLevel:
        return NoiseLevel(mechanism=self.mechanism, epsilon=self.epsilon, sensitivity=self.sensitivity, delta=self.delta)

    @property
    def tag(self) -> CalibrationTag:
        return CalibrationTag(id=self.id, noise=self.noise, n_students=self.n_students, truth_source=self.truth_source)

    def aggregator(self, *, estimate: Estimate = "mean") -> Aggregator:
        return self.params.aggregator(calibration=self.tag, estimate=estimate)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "qmatrix_id": self.qmatrix_id, "version": self.version, "method": self.method,
            "params": self.params.to_json(), "entities": list(self.entities), "epsilon": self.epsilon,
            "sensitivity": self.sensitivity, "mechanism": self.mechanism, "delta": self.delta,
            "truth_source": self.truth_source, "n_students": self.n_students, "metrics": dict(self.metrics),
            "notes": list(self.notes), "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CalibrationRecord:
        """Read a stored record, including the flat form written before parameters were typed."""
        data = dict(data)
        method = data.pop("method", "paper")
        if "params" in data:
            params = params_from_json(method, data.pop("params"))
        else:
            legacy = {k: data.pop(k) for k in _LEGACY_PARAMS if k in data}
            fields = params_from_json(method, {}).to_json()  # the fields this method's parameters have
            params = params_from_json(method, {k: v for k, v in legacy.items() if k in fields})
        return cls(params=params, **data)


def aggregator_for(
    record: CalibrationRecord | None,
    *,
    alpha: float = DEFAULT_ALPHA,
    aggregation: AggregationMode = "record",
    estimate: Estimate = "mean",
) -> Aggregator:
    """The aggregator for a request, given the calibration record that applies (or none).

    ``aggregation``: ``record`` — what the record prescribes (none: the uncorrected mean); ``auto`` —
    the same, but Bayes post-processing when there is no record; ``posterior`` / ``mean`` — that kind
    always: the record's own aggregator when it is of that kind, otherwise the uncalibrated one
    (uniform priors and the default τ; the plain mean with ``alpha`` and no residuals).
    """
    fitted = record.aggregator(estimate=estimate) if record is not None else None
    if aggregation in ("record", "auto"):
        if fitted is not None:
            return fitted
        kind = "posterior" if aggregation == "auto" else "mean"
    else:
        kind = aggregation
        if fitted is not None and fitted.kind == kind:
            return fitted
    return PosteriorAggregator(estimate=estimate) if kind == "posterior" else ResidualAggregator(alpha=alpha)
