"""Cohort analytics with central differential privacy."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import CohortServiceDep, PrincipalDep
from app.routes.responses import AUTH_ERRORS
from app.schemas import CohortReport, CohortReportRequest

router = APIRouter(prefix="/v1/cohort-report", tags=["cohort"])


@router.post("", response_model=CohortReport, responses={
    **AUTH_ERRORS,
    404: {"description": "unknown qmatrix_id"},
    422: {"description": "bad input or cohort too small"},
    429: {"description": "a student's budget is spent"},
})
async def create_cohort_report(
    body: CohortReportRequest, service: CohortServiceDep, principal: PrincipalDep
) -> CohortReport:
    """Mastery distribution (noisy mean and histogram per concept) of a class or school, ε-DP per student."""
    return await service.report(body, principal)
