"""Calibration jobs (``/v1/calibrate``, admin keys) and the calibration records they produce
(``/v1/calibrations``, any key of the tenant)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, status

from app.deps import AdminDep, CalibrationServiceDep, PrincipalDep
from app.pagination import Page, pages
from app.routes.responses import ADMIN_ERRORS, AUTH_ERRORS
from app.schemas import CalibrateJob, CalibrateRequest, CalibrationList, CalibrationPublic, JobAccepted
from app.schemas.common import Identifier

router = APIRouter(tags=["calibration"])


@router.post("/v1/calibrate", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown qmatrix_id"},
    409: {"description": "the tenant has FEDCD_MAX_ACTIVE_JOBS jobs queued or running already (Retry-After)"},
    422: {"description": "bad input, or unnoised answers or release on real students the tenant's policy refuses"},
})
async def create_calibration_job(body: CalibrateRequest, service: CalibrationServiceDep, principal: AdminDep) -> JobAccepted:
    """Start fitting the aggregation on a validation split; poll ``GET /v1/calibrate/{job_id}``.

    The fitted parameters are released with ``release_epsilon`` (charged to each validation student); on real
    students (``records``) ``"none"`` there or in ``epsilon`` needs a privacy policy with ``allow_unnoised``.
    """
    return JobAccepted(job_id=await service.submit(body, principal.tenant))


@router.get("/v1/calibrate/{job_id}", response_model=CalibrateJob, responses={
    **ADMIN_ERRORS, 404: {"description": "unknown job (another tenant's is unknown too)"},
})
async def read_calibration_job(
    job_id: Identifier, service: CalibrationServiceDep, principal: AdminDep
) -> CalibrateJob:
    return await service.job(job_id, principal.tenant)


@router.get("/v1/calibrations", response_model=CalibrationList, responses=AUTH_ERRORS)
async def read_calibrations(
    service: CalibrationServiceDep, principal: PrincipalDep, page: Annotated[Page, Depends(pages("calibrations", str, int, str))],
    qmatrix_id: Annotated[Identifier | None, Query(description="only the records of this Q-matrix")] = None,
) -> CalibrationList:
    """The tenant's calibration records and the shared ones, by Q-matrix id and version."""
    return await service.records(principal.tenant, qmatrix_id, page)


@router.get("/v1/calibrations/{calibration_id}", response_model=CalibrationPublic, responses={
    **AUTH_ERRORS, 404: {"description": "unknown id (another tenant's is unknown too)"},
})
async def read_calibration(
    calibration_id: Identifier, service: CalibrationServiceDep, principal: PrincipalDep
) -> CalibrationPublic:
    return await service.record(principal.tenant, calibration_id)
