"""The result of one evaluation run: rows of one table, plus what the plots need."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["VIA_API_ROW", "EvaluationResult", "Row"]

VIA_API_ROW = "served-via-api"  # the served row measured through a running gateway (evaluation.served_api)


def _clean(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


@dataclass
class Row:
    """One line of the table. ``epsilon`` None means no noise (ε = ∞) or not applicable."""

    name: str
    epsilon: float | None = None
    mae: float | None = None
    rmse: float | None = None
    auc: float | None = None
    acc: float | None = None
    ece: float | None = None
    n: int = 0
    mechanism: str = "none"
    generator: str | None = None  # simulated protocol: which model generated the responses
    filled: int = 0  # values counted by the uncovered-concept rule (evaluation.harness.fill_uncovered)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("mae", "rmse", "auc", "acc", "ece"):
            data[key] = _clean(data[key])
        if self.generator is None:
            data.pop("generator")
        return data


@dataclass
class EvaluationResult:
    dataset: str
    protocol: str
    n_students: int
    seed: int
    rows: list[Row]
    simulated_data: bool = False
    split: dict[str, int] = field(default_factory=dict)
    entities: list[str] = field(default_factory=list)
    entity_calls: dict[str, int] = field(default_factory=dict)
    entity_failures: dict[str, int] = field(default_factory=dict)
    method: str = "bias"
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # For plots: row key -> concept -> MAE; entity -> (predicted, observed) pairs.
    per_concept_error: dict[str, dict[str, float]] = field(default_factory=dict)
    reliability: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # served rows vs baselines: AUC differences with paired-bootstrap intervals (held-out protocol)
    significance: list[dict[str, Any]] = field(default_factory=list)
    served: dict[str, Any] = field(default_factory=dict)  # the served configuration and what it calibrated
    baselines: dict[str, Any] = field(default_factory=dict)  # baseline -> its training settings

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "protocol": self.protocol,
            "n_students": self.n_students,
            "seed": self.seed,
            "simulated_data": self.simulated_data,
            "split": self.split,
            "entities": self.entities,
            "entity_calls": self.entity_calls,
            "entity_failures": self.entity_failures,
            "calibration_method": self.method,
            "seconds": round(self.seconds, 1),
            "notes": self.notes,
            "served": self.served,
            "baselines": self.baselines,
            "rows": [r.to_json() for r in self.rows],
            "significance": self.significance,
        }
