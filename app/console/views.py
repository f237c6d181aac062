"""What the console's pages show, as plain data (filled by :mod:`app.console.data`, read by the templates)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.schemas import JobEvent, UsageReport
from app.services.activity import FailureEvent
from app.jobs import ACTIVE_STATES
from app.services.validation import SIMULATED_TRUTH
from calibration import CalibrationRecord
from calibration.calibrators import RELEASE_NOTE
from calibration.params import BiasParams, PaperParams, PosteriorParams, StackingParams

__all__ = ["ACTIVE_JOB", "CalibrationView", "EntityView", "FailureEvent", "JobView", "Overview", "QMatrixView"]

ACTIVE_JOB = ACTIVE_STATES  # not finished yet (cancelling: stopping after a cancel)


class _Stored(Protocol):
    """A stored calibration as the calibration store returns it."""

    @property
    def record(self) -> CalibrationRecord: ...

    @property
    def qmatrix_version(self) -> int: ...

    @property
    def shared(self) -> bool: ...


@dataclass
class Overview:
    since: float  # midnight UTC today
    diagnoses: int
    per_hour: list[tuple[float, int]]  # (hour start, diagnoses) over the last 24 hours
    usage: UsageReport
    failed_calls: dict[str, int]  # entity -> failed calls today
    reasons: dict[str, Counter[str]]  # entity -> reason -> count, from the stored diagnoses
    circuits: dict[str, str] | None  # entity -> state of those behind a breaker; None: the breakers' store did not answer
    refusals: dict[str, int]  # source -> budget 429s since this server started
    epsilon_today: float
    active_jobs: int


@dataclass
class EntityView:
    name: str
    kind: str
    model: str
    status: str
    circuit: str | None
    tier: int
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    concurrency: int
    deadline_s: float
    base_url: str | None
    weights: dict[str, str] = field(default_factory=dict)  # calibration id -> this entity's weight, as text
    calls_today: int = 0
    failed_today: int = 0
    last_error: FailureEvent | None = None


@dataclass(frozen=True)
class CalibrationView:
    record: CalibrationRecord
    qmatrix_version: int  # the version of the Q-matrix it was fitted on
    shared: bool  # the operator's, seen by every tenant

    @classmethod
    def of(cls, stored: _Stored) -> CalibrationView:
        return cls(record=stored.record, qmatrix_version=stored.qmatrix_version, shared=stored.shared)

    def reliability_withheld(self) -> str | None:
        """Why its reliability diagram may not be drawn, or None when it may. The diagram is exact in-sample
        statistics of the validation students (mean truth per bin, counts): shown only for SIMULATED students, or
        for the tenant's own calibration released without noise (its record publishes such statistics already). A
        DP release (``release_epsilon``) withholds them, and another tenant's (the operator's shared) students are
        not the viewer's to see."""
        if self.record.truth_source == SIMULATED_TRUTH:
            return None
        if self.shared:
            return ("it is the operator's shared calibration, fitted on real students: their answers are not shown "
                    "to tenants")
        if RELEASE_NOTE not in self.record.notes:
            return ("it was released with differential privacy (release_epsilon) from real students: the exact "
                    "in-sample reliability would be a release outside the ε accounted for, so it is withheld")
        return None

    def weight(self, entity: str) -> str:
        """The entity's say in this calibration, as one short text."""
        params = self.record.params
        if entity in params.excluded:
            return "left out"
        if isinstance(params, StackingParams):
            weights = [w[entity] for w in params.weights.values() if entity in w]
            if entity in params.pooled_weights:
                return f"w {params.pooled_weights[entity]:.3g} (pooled)"
            return f"w {sum(weights) / len(weights):.3g} (mean)" if weights else "—"
        if isinstance(params, PosteriorParams):
            tau = params.entity_error_sd.get(entity)
            return f"τ {tau:.3g}" if tau is not None else "unmeasured: not weighed"
        if isinstance(params, PaperParams | BiasParams):
            residuals = list(params.residuals.get(entity, {}).values())
            return f"r {sum(residuals) / len(residuals):+.3g}, α {params.alpha:.2g}" if residuals else "—"
        return "—"


@dataclass
class QMatrixView:
    id: str
    version: int
    builtin: bool
    concepts: list[str]
    items: list[tuple[str, str, list[str]]]  # at most _ITEMS_SHOWN
    item_count: int
    calibrations: list[CalibrationView] = field(default_factory=list)
    model: dict[str, Any] | None = None
    model_note: str = ""
    in_use: str | None = None  # the calibration diagnoses use now


@dataclass
class JobView:
    id: str
    kind: str
    status: str
    done: int
    total: int
    summary: str
    created_at: str
    updated_at: str
    error: str | None
    calibration_id: str | None
    resumed: int
    failed_entities: dict[str, int]
    metrics: dict[str, Any]
    notes: list[str]
    history: list[JobEvent] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_JOB

    @property
    def cancellable(self) -> bool:
        return self.status in ("queued", "running")

    def progress(self) -> dict[str, Any]:
        """What the console's live progress endpoint answers."""
        return {"job_id": self.id, "status": self.status, "done": self.done, "total": self.total,
                "error": self.error, "calibration_id": self.calibration_id,
                "history": [{"at": e.at, "status": e.status, "worker": e.worker, "message": e.message} for e in self.history]}
