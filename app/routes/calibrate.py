"""Calibration jobs (``/v1/calibrate``, admin keys) and the calibration records they produce
(``/v1/calibrations``, any key of the tenant)."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, status

from app.deps import AdminDep, CalibrationServiceDep, CalibrationStoreDep, JobRunnerDep, PrincipalDep, UsageStoreDep
from app.errors import InputError
from app.pagination import PageDep, page_of
from app.routes.responses import ADMIN_ERRORS, AUTH_ERRORS
from app.schemas import (
    CalibrateJob,
    CalibrateRequest,
    CalibrationList,
    CalibrationPublic,
    JobAccepted,
    JobEvent,
    JobProgress,
)
from app.storage import StoredCalibration

router = APIRouter(tags=["calibration"])


def _public(stored: StoredCalibration) -> CalibrationPublic:
    return CalibrationPublic.model_validate(
        {**stored.record.to_json(), "qmatrix_version": stored.qmatrix_version, "shared": stored.shared}
    )


@router.post("/v1/calibrate", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown qmatrix_id"}, 422: {"description": "bad input"},
})
async def create_calibration_job(body: CalibrateRequest, service: CalibrationServiceDep, principal: AdminDep) -> JobAccepted:
    """Start fitting the aggregation on a validation split; poll ``GET /v1/calibrate/{job_id}``.

    The fitted parameters are released with ``release_epsilon`` (charged to each validation student).
    """
    return JobAccepted(job_id=await service.submit(body, principal.tenant))


@router.get("/v1/calibrate/{job_id}", response_model=CalibrateJob, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown job (another tenant's is unknown too)"},
})
async def read_calibration_job(
    job_id: str, jobs: JobRunnerDep, usage: UsageStoreDep, principal: AdminDep
) -> CalibrateJob:
    row = await asyncio.to_thread(jobs.get, job_id, tenant=principal.tenant)
    if row is None or row.kind != "calibrate":
        raise InputError(("path", "job_id"), [f"unknown job id '{job_id}'"], status_code=404)
    history = await asyncio.to_thread(jobs.history, job_id)
    total = await asyncio.to_thread(usage.job_total, principal.tenant, job_id)
    return CalibrateJob(
        job_id=row.id,
        status=row.status,  # type: ignore[arg-type]
        progress=JobProgress(done=row.done, total=row.total, failed_entities=json.loads(row.failed_entities_json)),
        calibration_id=row.calibration_id,
        metrics=json.loads(row.metrics_json),
        notes=json.loads(row.notes_json),
        error=row.error,
        resumed=row.resumed,
        history=[JobEvent(at=e.at, status=e.status, worker=e.worker, message=e.message) for e in history],
        usage=total,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@router.get("/v1/calibrations", response_model=CalibrationList, responses=AUTH_ERRORS)
async def read_calibrations(
    calibrations: CalibrationStoreDep, principal: PrincipalDep, page: PageDep, qmatrix_id: str | None = None
) -> CalibrationList:
    """The tenant's calibration records and the shared ones, by Q-matrix id and version."""
    stored = await asyncio.to_thread(calibrations.list, principal.tenant, qmatrix_id)
    chunk, last = page_of(stored, page, key=lambda s: (s.record.qmatrix_id, s.record.version, s.record.id))
    return CalibrationList(**page.envelope([_public(s) for s in chunk], last))


@router.get("/v1/calibrations/{calibration_id}", response_model=CalibrationPublic, responses={
    **AUTH_ERRORS, 404: {"description": "unknown id (another tenant's is unknown too)"},
})
async def read_calibration(calibration_id: str, calibrations: CalibrationStoreDep, principal: PrincipalDep) -> CalibrationPublic:
    stored = await asyncio.to_thread(calibrations.get, principal.tenant, calibration_id)
    if stored is None:
        raise InputError(("path", "calibration_id"), [f"unknown calibration id '{calibration_id}'"], status_code=404)
    return _public(stored)
