"""Every background job of the tenant (admin keys): ``GET /v1/jobs`` (newest first, cursor-paginated, filtered by
kind and state), ``GET /v1/jobs/{job_id}`` and ``POST /v1/jobs/{job_id}/cancel`` — calibrations and upload-and-train
runs alike. Another tenant's job is 404."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal

from fastapi import APIRouter, Query, status

from app.deps import AdminDep, JobRunnerDep
from app.errors import InputError
from app.pagination import PageDep
from app.routes.responses import ADMIN_ERRORS
from app.schemas import JobEvent, JobList, JobProgress, JobPublic
from app.services.jobs import JobRunner

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


def _public(jobs: JobRunner, row, *, with_history: bool) -> JobPublic:  # type: ignore[no-untyped-def]
    history = jobs.history(row.id) if with_history else []
    return JobPublic(
        job_id=row.id, kind=row.kind, status=row.status,
        progress=JobProgress(done=row.done, total=row.total, failed_entities=json.loads(row.failed_entities_json)),
        calibration_id=row.calibration_id, metrics=json.loads(row.metrics_json), notes=json.loads(row.notes_json),
        error=row.error, resumed=row.resumed,
        history=[JobEvent(at=e.at, status=e.status, worker=e.worker, message=e.message) for e in history],
        created_at=row.created_at, updated_at=row.updated_at,
    )


JobState = Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
# The kinds the runner has handlers for (app.services.calibration, app.services.training): an enum, so a misspelt
# kind is a 422 rather than an empty page. A new kind of job is added here.
JobKind = Literal["calibrate", "train"]


@router.get("", response_model=JobList, responses=ADMIN_ERRORS)
async def read_jobs(
    jobs: JobRunnerDep, principal: AdminDep, page: PageDep,
    kind: Annotated[list[JobKind] | None, Query(description="only jobs of these kinds; repeat for several")] = None,
    state: Annotated[list[JobState] | None, Query(description="only jobs in these states; repeat for several")] = None,
) -> JobList:
    """The tenant's jobs, newest first (without their histories: read one job for that), ``limit`` per page;
    follow ``next_cursor`` for older ones."""
    before = page.after
    if before is not None and not (len(before) == 2 and all(isinstance(part, str) for part in before)):
        raise InputError(("query", "cursor"), ["this cursor belongs to another list"])
    rows = await asyncio.to_thread(
        jobs.page, principal.tenant, limit=page.limit + 1, before=before,  # type: ignore[arg-type]
        kinds=kind or (), states=state or (),
    )
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    data = [_public(jobs, row, with_history=False) for row in rows]
    return JobList(**page.envelope(data, (rows[-1].created_at, rows[-1].id) if more else None))


@router.get("/{job_id}", response_model=JobPublic, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown job (another tenant's is unknown too)"},
})
async def read_job(job_id: str, jobs: JobRunnerDep, principal: AdminDep) -> JobPublic:
    row = await asyncio.to_thread(jobs.get, job_id, tenant=principal.tenant)
    if row is None:
        raise InputError(("path", "job_id"), [f"unknown job id '{job_id}'"], status_code=404)
    return await asyncio.to_thread(_public, jobs, row, with_history=True)


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown job (another tenant's is unknown too)"},
    409: {"description": "the job has already finished"},
})
async def cancel_job(job_id: str, jobs: JobRunnerDep, principal: AdminDep) -> JobPublic:
    """Cancel a job: a queued one at once (``cancelled``); a running one is ``cancelling`` until the worker running it
    stops it (within a heartbeat; its partial result is dropped, its pending privacy charges refunded, an upload
    deleted), then ``cancelled``. A finished job is a 409."""
    outcome, cancelled = await jobs.cancel(job_id, tenant=principal.tenant, by=principal.key_id)
    if outcome is None:
        raise InputError(("path", "job_id"), [f"unknown job id '{job_id}'"], status_code=404)
    if not cancelled and outcome != "cancelling":  # a repeated cancel of a job still stopping is accepted again
        raise InputError(("path", "job_id"), [f"job '{job_id}' has already finished ({outcome})"], status_code=409)
    row = await asyncio.to_thread(jobs.get, job_id, tenant=principal.tenant)
    assert row is not None
    return await asyncio.to_thread(_public, jobs, row, with_history=True)
