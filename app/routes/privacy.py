"""The per-student privacy ledger, read-only."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import LedgerDep, TenantDep
from app.errors import InputError
from app.schemas import StudentBudget

router = APIRouter(prefix="/v1/privacy", tags=["privacy"])


@router.get("/students/{student_id}", response_model=StudentBudget)
async def read_student_budget(student_id: str, ledger: LedgerDep, tenant: TenantDep) -> StudentBudget:
    """ε and δ spent and remaining for one student of the calling tenant (``X-Tenant-ID``)."""
    if ledger is None:
        raise InputError(("path", "student_id"), ["the privacy ledger is off on this server"], status_code=404)
    return StudentBudget(**await ledger.astatus(tenant, student_id))
