"""The privacy frontier's constants and result types: one point, one dataset's frontier, the whole run."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_EPSILONS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
POSTPROCESSING = ("mean", "posterior", "posterior-uniform")
DEFAULT_REPEATS = 3  # noise draws per test row and setting in run_privacy_frontier (the committed report)
BOOTSTRAP = 200  # paired bootstrap resamples (over test students) for AUC differences

Mastery = dict[str, float]
Predictions = dict[str, dict[str, float]]
Progress = Callable[[int], None]


# --------------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------------


@dataclass
class FrontierPoint:
    """One (dataset, mechanism, ε, post-processing) point. ``epsilon`` None: no noise (mechanism "none").

    ``mae``: paper protocol, test students. ``auc``: held-out protocol, test students.
    ``true_mae``: SIMULATED data only, the same estimates against the true mastery.
    ``*_diff`` / ``*_se`` (posterior kinds only): paired difference to the plain mean at the same
    setting (posterior − mean; MAE: negative is better, AUC: positive is better) and its standard
    error over test students (MAE: per-student sums; AUC: paired bootstrap).
    """

    dataset: str
    mechanism: str
    epsilon: float | None
    postprocessing: str
    mae: float | None = None
    auc: float | None = None
    true_mae: float | None = None
    n_mae: int = 0
    n_auc: int = 0
    mae_diff: float | None = None
    mae_diff_se: float | None = None
    auc_diff: float | None = None
    auc_diff_se: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


@dataclass
class DatasetFrontier:
    name: str
    simulated_data: bool
    n_students: int
    n_concepts: int
    mean_assessed_concepts: float
    split: dict[str, int]
    points: list[FrontierPoint]
    references: dict[str, dict[str, float | None]]  # "constant" / "oracle" -> metric -> value
    posterior_fit: dict[str, dict[str, Any]]  # protocol -> {"entity_error_sd": ..., "priors": ...}
    entity_calls: dict[str, int] = field(default_factory=dict)
    entity_failures: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["points"] = [p.to_json() for p in self.points]
        data["seconds"] = round(self.seconds, 1)
        return data


@dataclass
class FrontierResult:
    datasets: list[DatasetFrontier]
    epsilons: list[float]
    mechanisms: list[str]
    entities: list[str]
    seed: int
    sensitivity: str
    delta: float
    repeats: int = 1
    seconds: float = 0.0

    @property
    def simulated_entities(self) -> list[str]:
        return [e for e in self.entities if e.startswith("sim:")]

    def points(self, dataset: str | None = None, **match: object) -> list[FrontierPoint]:
        out = []
        for d in self.datasets:
            if dataset is not None and d.name != dataset:
                continue
            out += [p for p in d.points if all(getattr(p, k) == v for k, v in match.items())]
        return out

    def point(self, dataset: str, mechanism: str, epsilon: float | None, postprocessing: str) -> FrontierPoint:
        if epsilon is None:
            mechanism = "none"
        found = self.points(dataset, mechanism=mechanism, epsilon=epsilon, postprocessing=postprocessing)
        if not found:
            raise KeyError((dataset, mechanism, epsilon, postprocessing))
        return found[0]

    def dataset(self, name: str) -> DatasetFrontier:
        return next(d for d in self.datasets if d.name == name)

    def to_json(self) -> dict[str, Any]:
        """The run's own data. The analysis of it (verdicts, the recommended default) is
        ``evaluation.frontier.recommend``'s, which imports this module: the report adds it
        (``evaluation.frontier.report.frontier_json``), so imports run one way."""
        return {
            "epsilons": self.epsilons,
            "mechanisms": self.mechanisms,
            "postprocessing": list(POSTPROCESSING),
            "entities": self.entities,
            "simulated_entities": self.simulated_entities,
            "seed": self.seed,
            "sensitivity": self.sensitivity,
            "delta": self.delta,
            "repeats": self.repeats,
            "seconds": round(self.seconds, 1),
            "datasets": [d.to_json() for d in self.datasets],
        }
