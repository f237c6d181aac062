"""Cohort analytics with central differential privacy."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import CalibrationStoreDep, FederationDep, LedgerDep, QMatrixStoreDep, SettingsDep, TenantDep
from app.schemas import CohortReport, CohortReportRequest
from app.services.cohort import cohort_report

router = APIRouter(prefix="/v1/cohort-report", tags=["cohort"])


@router.post("", response_model=CohortReport, responses={422: {"description": "bad input or cohort too small"}, 429: {"description": "a student's budget is spent"}})
async def create_cohort_report(
    body: CohortReportRequest,
    federation: FederationDep,
    qmatrices: QMatrixStoreDep,
    calibrations: CalibrationStoreDep,
    settings: SettingsDep,
    ledger: LedgerDep,
    tenant: TenantDep,
) -> CohortReport:
    """Mastery distribution (noisy mean and histogram per concept) of a class or school, ε-DP per student."""
    return await cohort_report(
        body, pipeline=federation.pipeline, qmatrices=qmatrices, calibrations=calibrations, settings=settings,
        ledger=ledger, tenant=tenant,
    )
