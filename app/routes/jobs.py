"""Every background job of the tenant (admin keys): ``GET /v1/jobs`` (newest first, cursor-paginated, filtered by
kind and state), ``GET /v1/jobs/{job_id}`` and ``POST /v1/jobs/{job_id}/cancel`` — calibrations and upload-and-train
runs alike. Another tenant's job is 404."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, status

from app.deps import AdminDep, JobQueriesDep
from app.pagination import Page, pages
from app.routes.responses import ADMIN_ERRORS
from app.schemas import JobList, JobPublic
from app.schemas.common import Identifier

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobState = Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
# The kinds the runner has handlers for (app.jobs.calibration, app.jobs.training): an enum, so a misspelt
# kind is a 422 rather than an empty page. A new kind of job is added here.
JobKind = Literal["calibrate", "train"]


@router.get("", response_model=JobList, responses=ADMIN_ERRORS)
async def read_jobs(
    jobs: JobQueriesDep, principal: AdminDep, page: Annotated[Page, Depends(pages("jobs", str, str))],
    kind: Annotated[list[JobKind] | None, Query(description="only jobs of these kinds; repeat for several")] = None,
    state: Annotated[list[JobState] | None, Query(description="only jobs in these states; repeat for several")] = None,
) -> JobList:
    """The tenant's jobs, newest first (without their histories: read one job for that), ``limit`` per page;
    follow ``next_cursor`` for older ones."""
    return await jobs.page(principal.tenant, page, kinds=kind or (), states=state or ())


@router.get("/{job_id}", response_model=JobPublic, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown job (another tenant's is unknown too)"},
})
async def read_job(job_id: Identifier, jobs: JobQueriesDep, principal: AdminDep) -> JobPublic:
    return await jobs.get(job_id, principal.tenant)


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown job (another tenant's is unknown too)"},
    409: {"description": "the job has already finished"},
})
async def cancel_job(job_id: Identifier, jobs: JobQueriesDep, principal: AdminDep) -> JobPublic:
    """Cancel a job: a queued one at once (``cancelled``); a running one is ``cancelling`` until the worker running it
    stops it (within a heartbeat; its partial result is dropped, its pending privacy charges refunded, an upload
    deleted), then ``cancelled``. A finished job is a 409."""
    return await jobs.cancel(job_id, principal.tenant, by=principal.key_id)
