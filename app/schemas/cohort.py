"""A cohort report: central-DP statistics over many students (``/v1/cohort/report``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, FailFast, Field

from app.schemas.common import EpsilonValue, Name, WholeNumber
from app.schemas.diagnosis import StudentIn
from app.schemas.usage import Usage

__all__ = ["CohortConcept", "CohortReport", "CohortReportRequest"]


class CohortReportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    qmatrix_id: str
    students: Annotated[list[StudentIn], FailFast()] = Field(min_length=1, max_length=5000)
    epsilon: EpsilonValue = Field(description="central-DP ε for the whole report, charged to every student in it")
    bins: Annotated[int, Field(ge=1, le=20), WholeNumber] = Field(default=5, description="histogram bins over [0, 1]")
    entities: list[Name] | None = Field(default=None, min_length=1)


class CohortConcept(BaseModel):
    mean: float | None = Field(description="noisy sum / noisy count; null when the noisy count is below 1")
    noisy_count: float
    histogram: dict[str, list[float]] = Field(description='{"bin_edges": [...], "counts": [...]} (noisy counts)')


class CohortReport(BaseModel):
    cohort_size: int
    concepts: dict[str, CohortConcept]
    epsilon: float
    epsilon_per_statistic: float
    mechanism: str = "central Laplace on bounded contributions (sum and histogram per concept)"
    min_cohort_size: int
    charged_epsilon_per_student: float
    calibration_id: str | None
    notes: list[str]
    usage: Usage = Field(default_factory=Usage, description="entity usage of diagnosing the cohort")

