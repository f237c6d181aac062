"""Upload a response history and train the tenant's own model of a Q-matrix: ``POST /v1/qmatrices/{id}/train``
(admin keys; ``multipart/form-data`` with the CSV as the field ``responses``). Progress: ``GET /v1/jobs/{job_id}``."""

from __future__ import annotations

import asyncio
from fastapi import APIRouter, Request, status
from python_multipart.exceptions import MultipartParseError

from app.deps import AdminDep, TrainingServiceDep
from app.errors import InputError
from app.routes.responses import ADMIN_ERRORS
from app.schemas import JobAccepted
from app.schemas.common import Identifier

router = APIRouter(prefix="/v1/qmatrices", tags=["qmatrices"])

_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["responses"],
    "properties": {"responses": {"type": "string", "format": "binary",
                                 "description": "student_id,item_id,correct[,answer] (or the wide form)"}},
}}}}}


@router.post("/{qmatrix_id}/train", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted,
             openapi_extra=_BODY, responses={
                 **ADMIN_ERRORS, 404: {"description": "unknown Q-matrix"}, 413: {"description": "upload too large"},
                 409: {"description": "the tenant has as many active jobs, or as many stored upload bytes, as it may "
                                       "(Retry-After)"},
                 422: {"description": "unreadable CSV, items not in the Q-matrix, or too few students"}})
async def train_qmatrix(
    qmatrix_id: Identifier, request: Request, service: TrainingServiceDep, principal: AdminDep
) -> JobAccepted:
    """Train the tenant's own local-fed model of this Q-matrix from its response history, gate it on held-out
    students of the upload, publish it, then calibrate on a validation part (docs/local-fed.md, "Upload and train")."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "multipart/form-data":
        raise InputError(("body",), ["send multipart/form-data with the CSV as the field 'responses'"])
    try:
        form = await request.form()
    except (MultipartParseError, ValueError) as exc:
        raise InputError(("body",), [f"the multipart form cannot be read: {exc}"]) from exc
    upload = form.get("responses")
    if upload is None or isinstance(upload, str):
        raise InputError(("body", "responses"), ["upload the CSV as the form field 'responses'"])
    data = await upload.read()
    return JobAccepted(job_id=await asyncio.to_thread(service.accept, qmatrix_id, data, principal.tenant))
