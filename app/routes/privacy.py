"""The per-student privacy ledger of the caller's tenant, read-only.

``POST /v1/privacy/lookup`` takes the student id in the body, so it appears in no URL
and no access log; the ``GET`` form is kept for convenience (the access log records route
templates, never raw paths, so its id is not logged either).
"""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import LedgerDep, PrincipalDep
from app.errors import InputError
from app.routes.responses import AUTH_ERRORS
from app.schemas import StudentBudget, StudentLookup
from privacy import PrivacyLedger
from qmatrix import Identifier

router = APIRouter(prefix="/v1/privacy", tags=["privacy"])

_ERRORS = {**AUTH_ERRORS, 404: {"description": "the privacy ledger is off on this server"}}


async def _budget(ledger: PrivacyLedger | None, tenant: str, student_id: str) -> StudentBudget:
    if ledger is None:
        raise InputError(("path", "student_id"), ["the privacy ledger is off on this server"], status_code=404)
    return StudentBudget(**await ledger.astatus(tenant, student_id))


@router.post("/lookup", response_model=StudentBudget, responses=_ERRORS)
async def create_student_budget_lookup(body: StudentLookup, ledger: LedgerDep, principal: PrincipalDep) -> StudentBudget:
    """ε and δ spent and remaining for one student of the caller's tenant (id in the body)."""
    return await _budget(ledger, principal.tenant, body.student_id)


@router.get("/students/{student_id}", response_model=StudentBudget, responses=_ERRORS)
async def read_student_budget(student_id: Identifier, ledger: LedgerDep, principal: PrincipalDep) -> StudentBudget:
    """ε and δ spent and remaining for one student of the caller's tenant."""
    return await _budget(ledger, principal.tenant, student_id)
