"""Background jobs of a tenant, whatever their kind (``/v1/jobs``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.pagination import Paginated

__all__ = ["JobAccepted", "JobEvent", "JobList", "JobProgress", "JobPublic"]


class JobAccepted(BaseModel):
    job_id: str


class JobProgress(BaseModel):
    done: int
    total: int
    failed_entities: dict[str, int] = Field(description="entity -> students for whom it failed")


class JobEvent(BaseModel):
    at: str
    status: str = Field(description="queued | running | released | cancelling | cancelled | succeeded | failed")
    worker: str | None = Field(description="the worker process (host:pid:id) that made the change")
    message: str


class JobPublic(BaseModel):
    """Any background job of the tenant (``GET /v1/jobs``): a calibration or an upload-and-train run."""

    job_id: str
    kind: str = Field(description="calibrate | train")
    status: Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
    progress: JobProgress
    calibration_id: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict, description="what the job measured and produced")
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    resumed: int = 0
    history: list[JobEvent] = Field(default_factory=list, description="every status change, oldest first")
    created_at: str
    updated_at: str


class JobList(Paginated[JobPublic]):
    """The tenant's jobs, newest first."""

