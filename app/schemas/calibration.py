"""Calibration bodies: the request, its job, and the stored record (``/v1/calibrate``, ``/v1/calibrations``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, FailFast, Field, model_validator

from app.pagination import Paginated
from app.schemas.common import Delta, Epsilon, Identifier, Name, WholeNumber
from app.schemas.jobs import JobEvent, JobProgress
from app.schemas.usage import Usage
from privacy import MechanismName
from qmatrix import Response

__all__ = [
    "CalibrateJob",
    "CalibrateRequest",
    "CalibrationList",
    "CalibrationPublic",
    "CalibrationRecordIn",
    "DatasetRef",
]


class CalibrationRecordIn(BaseModel):
    """One validation student: responses, and the truth when it is known."""

    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(min_length=1)
    truth: dict[str, float] | None = Field(
        default=None, description="concept -> mastery in [0, 1]; absent: the paper's proportion-correct rule"
    )

    @model_validator(mode="after")
    def _truth_in_range(self) -> CalibrationRecordIn:
        for concept, value in (self.truth or {}).items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"truth['{concept}'] must be in [0, 1], got {value}")
        return self


class DatasetRef(BaseModel):
    """A validation split of a dataset, drawn with the evaluation harness's seeded split."""

    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    # Named datasets only: a request never names a path on the server's disk (the CLI may).
    name: Literal["frcsub", "assist0910", "uci", "synthetic"] = Field(
        description="frcsub | assist0910 | uci | synthetic: SIMULATED DINA students with known mastery, on the "
        "request's qmatrix_id (any Q-matrix of the tenant; the example when omitted)"
    )
    part: Literal["train", "validation", "test"] = "validation"
    seed: Annotated[int, Field(ge=0, le=2**32 - 1), WholeNumber] = Field(default=0, description="the split's seed (NumPy's range)")
    max_students: Annotated[int, Field(ge=1), WholeNumber] | None = Field(default=None, description="subsample the dataset first")


class CalibrateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={  # a request: no coercion
        "examples": [{"dataset": {"name": "synthetic", "max_students": 20}, "method": "bias"}],
        # What _one_source checks, stated: records (with qmatrix_id) or a dataset, never both; isotonic: stacking.
        "oneOf": [
            {"required": ["records", "qmatrix_id"],
             "properties": {"records": {"type": "array"}, "qmatrix_id": {"type": "string"}, "dataset": {"type": "null"}}},
            {"required": ["dataset"], "properties": {"dataset": {"type": "object"}, "records": {"type": "null"}}},
        ],
        "anyOf": [{"properties": {"isotonic": {"const": False}}},
                  {"properties": {"method": {"enum": ["stacking", None]}}}],
    })

    qmatrix_id: str | None = Field(default=None, description="required with inline records")
    records: list[CalibrationRecordIn] | None = Field(default=None, min_length=1)
    dataset: DatasetRef | None = None
    epsilon: Epsilon | None = Field(
        default=None, description="ε the validation answers are privatized at; omitted: the server default (what diagnoses use)"
    )
    mechanism: MechanismName | None = Field(
        default=None, description="mechanism the validation answers are privatized with; omitted: the server default"
    )
    sensitivity: Literal["paper", "assessed"] | None = None
    delta: Delta = Field(default=1e-5, description="δ, for the gaussian mechanism only")
    entities: list[Name] | None = Field(default=None, min_length=1)
    method: Literal["paper", "bias", "stacking", "posterior"] | None = Field(
        default=None, description="omitted: the server default (FEDCD_DEFAULT_CALIBRATION_METHOD)"
    )
    isotonic: bool = Field(default=False, description="stacking only: map each entity through an isotonic curve first")
    release_epsilon: Epsilon | None = Field(
        default=None,
        description="ε with which the fitted parameters are released (charged to each validation student); "
        "omitted: the server default; \"none\": released without noise (the record says so)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> CalibrateRequest:
        if (self.records is None) == (self.dataset is None):
            raise ValueError("give exactly one of 'records' or 'dataset'")
        if self.records is not None and self.qmatrix_id is None:
            raise ValueError("'qmatrix_id' is required with 'records'")
        if self.isotonic and self.method not in (None, "stacking"):
            raise ValueError("isotonic applies to method 'stacking' only")
        return self


class CalibrateJob(BaseModel):
    job_id: str
    status: Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
    progress: JobProgress
    calibration_id: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    resumed: int = Field(default=0, description="times this job was resumed (after a restart or a dead worker)")
    history: list[JobEvent] = Field(default_factory=list, description="every status change, oldest first")
    usage: Usage = Field(default_factory=Usage, description="entity usage of the job's finished students so far")
    created_at: str
    updated_at: str


class CalibrationPublic(BaseModel):
    id: str
    qmatrix_id: str
    qmatrix_version: int = Field(description="the Q-matrix version the calibration was fitted on")
    shared: bool = Field(default=False, description="the server's shared calibration (read-only, every tenant)")
    version: int
    method: str
    params: dict[str, Any] = Field(
        description="what the method fitted: paper/bias {alpha, residuals}; stacking {weights, intercepts, isotonic, "
        "pooled_weights, pooled_intercept, selection: the cross-validated choice between the stack and each member "
        "alone (every candidate's score, the margin, the rule), fallback: the other members' stack where the chosen "
        "member did not answer, measured_error: the stack's error its intervals come from, release: under release_epsilon each DP part's ε, the released stack and the DP guard's choice (a stack, or the plain mean)}; posterior {priors: concept -> Beta(a, b), entity_error_sd: entity -> τ}; "
        "every method: excluded {entity: {answers, students}}, the entities left out for too few successful "
        "validation answers (FEDCD_CALIBRATION_MIN_ANSWERS): no weight, their answers are not aggregated"
    )
    entities: list[str]
    epsilon: float | None = Field(description="the noise level diagnoses are expected to use (null: no noise)")
    sensitivity: str
    mechanism: str
    delta: float
    truth_source: str
    n_students: int
    metrics: dict[str, float] = Field(
        description="validation_mae is k-fold cross-validated over the validation students; validation_mae_in_sample "
        "scores the released parameters on the students they were fitted on. Under release_epsilon neither is "
        "computed nor published (they would be releases outside the ε accounted for): only counts and what the "
        "release published with noise (e.g. release_epsilon_* and the DP guard's noisy MAE change)"
    )
    notes: list[str]
    created_at: str


class CalibrationList(Paginated[CalibrationPublic]):
    """Calibration records by Q-matrix id and version."""

