from __future__ import annotations

from fastapi import APIRouter

from app.deps import CalibrationStoreDep, FederationDep, LedgerDep, QMatrixStoreDep, SettingsDep, TenantDep
from app.schemas import BatchDiagnoseRequest, BatchDiagnoseResponse, DiagnoseRequest, DiagnoseResponse
from app.services.diagnosis import diagnose_batch, diagnose_one

router = APIRouter(prefix="/v1/diagnose", tags=["diagnose"])

_ERRORS = {
    404: {"description": "unknown qmatrix_id"},
    422: {"description": "bad input; `detail[].loc` names the field, unknown item ids are listed"},
    429: {"description": "the student's lifetime privacy budget is spent"},
    503: {"description": "every entity failed; each entity's reason is listed"},
}


@router.post("", response_model=DiagnoseResponse, responses=_ERRORS)
async def create_diagnosis(
    body: DiagnoseRequest,
    federation: FederationDep,
    qmatrices: QMatrixStoreDep,
    calibrations: CalibrationStoreDep,
    settings: SettingsDep,
    ledger: LedgerDep,
    tenant: TenantDep,
) -> DiagnoseResponse:
    """Diagnose one student: fan out to the entities, privatize each answer, aggregate.

    Each answered request spends ε per entity answer from the student's lifetime budget
    (per ``X-Tenant-ID``); an identical request within the repeat window gets the same answer free.
    """
    return await diagnose_one(
        body, pipeline=federation.pipeline, qmatrices=qmatrices, calibrations=calibrations, settings=settings,
        ledger=ledger, tenant=tenant,
    )


@router.post("/batch", response_model=BatchDiagnoseResponse, responses=_ERRORS)
async def create_diagnosis_batch(
    body: BatchDiagnoseRequest,
    federation: FederationDep,
    qmatrices: QMatrixStoreDep,
    calibrations: CalibrationStoreDep,
    settings: SettingsDep,
    ledger: LedgerDep,
    tenant: TenantDep,
) -> BatchDiagnoseResponse:
    """Diagnose many students with one Q-matrix, a bounded number at a time."""
    return await diagnose_batch(
        body, pipeline=federation.pipeline, qmatrices=qmatrices, calibrations=calibrations, settings=settings,
        ledger=ledger, tenant=tenant,
    )
