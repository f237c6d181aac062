"""Every request and response body of the HTTP API, in one place."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from qmatrix import Response

__all__ = [
    "BatchDiagnoseRequest",
    "BatchDiagnoseResponse",
    "BatchError",
    "DiagnoseRequest",
    "DiagnoseResponse",
    "EntityInfo",
    "EntityList",
    "EntityReport",
    "Health",
    "PrivacyBlock",
    "QMatrixCreate",
    "QMatrixItem",
    "QMatrixList",
    "QMatrixPublic",
    "StudentIn",
]


class QMatrixItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    text: str | None = None
    concepts: list[str]


class QMatrixCreate(BaseModel):
    """The JSON form of a Q-matrix."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    concepts: list[str] = Field(min_length=1)
    items: list[QMatrixItem] = Field(min_length=1)


class QMatrixPublic(QMatrixCreate):
    n_items: int
    n_concepts: int
    builtin: bool = False


class QMatrixList(BaseModel):
    data: list[str]
    count: int


Epsilon = float | Literal["none"]


class _DiagnoseOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    qmatrix_id: str | None = None
    qmatrix: QMatrixCreate | None = Field(default=None, description="an inline Q-matrix instead of qmatrix_id")
    epsilon: Epsilon | None = Field(
        default=None,
        description="ε of the Laplace noise on each entity's answer; omitted: the server default; \"none\": no noise",
    )
    sensitivity: Literal["paper", "assessed"] | None = Field(
        default=None, description="Δ = all K concepts (paper) or the concepts assessed by this request"
    )
    entities: list[str] | None = Field(default=None, min_length=1, description="entity names; omitted: all")
    calibration_id: str | None = None
    include_entities: bool = False

    @model_validator(mode="after")
    def _one_qmatrix(self) -> _DiagnoseOptions:
        if (self.qmatrix_id is None) == (self.qmatrix is None):
            raise ValueError("give exactly one of 'qmatrix_id' or 'qmatrix'")
        if isinstance(self.epsilon, float) and not self.epsilon > 0:
            raise ValueError("epsilon must be > 0, or \"none\" for no noise")
        return self


class DiagnoseRequest(_DiagnoseOptions):
    student_id: str = Field(min_length=1, max_length=256)
    responses: list[Response] = Field(min_length=1)


class StudentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    student_id: str = Field(min_length=1, max_length=256)
    responses: list[Response] = Field(min_length=1)


class BatchDiagnoseRequest(_DiagnoseOptions):
    students: list[StudentIn] = Field(min_length=1)


class EntityReport(BaseModel):
    name: str
    status: Literal["ok", "partial", "failed"]
    latency_ms: float
    mastery: dict[str, float] | None = Field(description="privatized: noise added before aggregation")
    missing: list[str] = []
    error: str | None = None
    model: str = ""
    attempts: int = 0
    repairs: dict[str, int] = Field(default_factory=dict, description="repair rule -> times applied")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class PrivacyBlock(BaseModel):
    mechanism: Literal["laplace", "none"]
    epsilon: float | None
    sensitivity: float | None
    noise_scale: float
    sensitivity_mode: Literal["paper", "assessed"]
    scope: str = "local DP: noise added to each entity's answer before aggregation"


class DiagnoseResponse(BaseModel):
    student_id: str
    mastery: dict[str, float] = Field(description="assessed concepts only")
    missing_concepts: list[str] = Field(default_factory=list, description="assessed concepts no entity answered")
    entities: list[EntityReport] | None = None
    failed_entities: list[str] = Field(default_factory=list)
    privacy: PrivacyBlock
    calibration_id: str | None
    request_id: str
    latency_ms: float


class BatchError(BaseModel):
    student_id: str
    status_code: int
    detail: object


class BatchDiagnoseResponse(BaseModel):
    results: list[DiagnoseResponse]
    errors: list[BatchError]
    count: int


class EntityInfo(BaseModel):
    name: str
    kind: str
    model: str
    status: str = Field(description="ready | loading | not_loaded | configured | error: ...")
    temperature: float | None = Field(description="sent to the backend; null: not sent")
    max_tokens: int
    structured_output: str
    concurrency: int
    deadline_s: float
    base_url: str | None = None


class EntityList(BaseModel):
    data: list[EntityInfo]
    count: int


class Health(BaseModel):
    status: Literal["ok"]
    entities: int
    version: str
