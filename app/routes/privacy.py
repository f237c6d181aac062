"""The per-student privacy ledger of the caller's tenant, read-only.

``POST /v1/privacy/lookup`` takes the student id in the body, so it appears in no URL
and no access log; the ``GET`` form is kept for convenience (the access log records route
templates, never raw paths, so its id is not logged either).
"""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import BudgetServiceDep, PrincipalDep
from app.routes.responses import AUTH_ERRORS
from app.schemas import StudentBudget, StudentLookup
from app.schemas.common import Identifier

router = APIRouter(prefix="/v1/privacy", tags=["privacy"])

_ERRORS = {**AUTH_ERRORS, 404: {"description": "the privacy ledger is off on this server"}}


@router.post("/lookup", response_model=StudentBudget, responses=_ERRORS)
async def create_student_budget_lookup(body: StudentLookup, budgets: BudgetServiceDep, principal: PrincipalDep) -> StudentBudget:
    """The student's budget under the tenant's policy: the period's spend, what remains, when it renews, the
    lifetime total (id in the body)."""
    return await budgets.student(principal, body.student_id)


@router.get("/students/{student_id}", response_model=StudentBudget, responses=_ERRORS)
async def read_student_budget(student_id: Identifier, budgets: BudgetServiceDep, principal: PrincipalDep) -> StudentBudget:
    """ε and δ spent and remaining for one student of the caller's tenant."""
    return await budgets.student(principal, student_id)
