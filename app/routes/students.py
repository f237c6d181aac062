"""A student's data rights (admin keys, README "Student data"): ``GET /v1/students/{student_id}/export`` — everything
stored about the student, each privacy charge included — and ``DELETE /v1/students/{student_id}`` — erase it, all
but the spend the budget cap is enforced on. Another tenant's student is never seen: everything is looked up under
the caller's tenant (an unknown student exports empty and erases nothing)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from app.deps import AdminDep
from app.routes.responses import ADMIN_ERRORS
from app.schemas.students import StudentErasure, StudentExport
from app.services.students import StudentDataService
from qmatrix import Identifier

router = APIRouter(prefix="/v1/students", tags=["students"])


async def _service(request: Request) -> StudentDataService:
    return request.app.state.gateway.students


StudentDataDep = Annotated[StudentDataService, Depends(_service)]


@router.get("/{student_id}/export", response_model=StudentExport, responses=ADMIN_ERRORS)
async def read_student_export(student_id: Identifier, service: StudentDataDep, principal: AdminDep) -> StudentExport:
    """Everything stored about the student (JSON): each privacy charge (when, source, ε, status), the released
    diagnoses still kept, the jobs whose inputs hold the student, the budget now and the retention in force."""
    return await service.export(principal.tenant, student_id)


@router.delete("/{student_id}", response_model=StudentErasure, responses={
    **ADMIN_ERRORS, 409: {"description": "a diagnosis of the student is in flight, or a queued or running job holds "
                                         "the student: erase again once it has finished"}})
async def delete_student(student_id: Identifier, service: StudentDataDep, principal: AdminDep) -> StudentErasure:
    """Erase every stored trace of the student's data: released diagnoses, the request fingerprints of the repeat
    rule, cached entity answers made from their responses, job inputs and results. The privacy ledger keeps each
    charge's spend under the keyed hash, so erasure never resets the budget; the response says what was removed
    and what is kept, and why."""
    return await service.erase(principal.tenant, student_id)
