from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.deps import DiagnosisServiceDep, PrincipalDep
from app.routes.responses import AUTH_ERRORS
from app.schemas import BatchDiagnoseRequest, BatchDiagnoseResponse, DiagnoseRequest, DiagnoseResponse

router = APIRouter(prefix="/v1/diagnose", tags=["diagnose"])

_ERRORS = {
    **AUTH_ERRORS,
    404: {"description": "unknown qmatrix_id or calibration_id (another tenant's is unknown too)"},
    422: {"description": "bad input; `detail[].loc` names the field, unknown item ids are listed"},
    429: {"description": "the student's privacy budget is spent"},
    503: {"description": "every entity failed (each entity's reason is listed), or none was there to ask"},
}


def _json(model: DiagnoseResponse | BatchDiagnoseResponse) -> Response:
    """The response serialized once, by pydantic-core. Returning the model would make FastAPI validate it against
    ``response_model`` again, dump it to Python objects and run ``json.dumps`` over them: the same JSON object for
    about three times the CPU of this hot path. ``response_model`` stays on the route for the OpenAPI schema."""
    return Response(content=model.model_dump_json(), media_type="application/json")


@router.post("", response_model=DiagnoseResponse, responses=_ERRORS)
async def create_diagnosis(body: DiagnoseRequest, service: DiagnosisServiceDep, principal: PrincipalDep) -> Response:
    """Diagnose one student: fan out to the entities, privatize each answer, aggregate.

    Each answered request spends ε per entity answer from the student's budget (per tenant of
    the API key); an identical request within the repeat window gets the same answer free.
    """
    return _json(await service.diagnose(body, principal))


@router.post("/batch", response_model=BatchDiagnoseResponse, responses=_ERRORS)
async def create_diagnosis_batch(
    body: BatchDiagnoseRequest, service: DiagnosisServiceDep, principal: PrincipalDep
) -> Response:
    """Diagnose many students with one Q-matrix, a bounded number at a time."""
    return _json(await service.diagnose_batch(body, principal))
