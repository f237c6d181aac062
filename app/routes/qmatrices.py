"""Q-matrices of the caller's tenant: register (JSON form, or CSV as an upload or a text/csv body),
replace (a new version), delete, read back. Writing needs an admin key; another tenant's
Q-matrix is 404; the built-in example is shared read-only."""

from __future__ import annotations

import asyncio
from pathlib import PurePath

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from python_multipart.exceptions import MultipartParseError

from app.deps import AdminDep, PrincipalDep, QMatrixServiceDep, SettingsDep
from app.errors import InputError
from app.pagination import Page, page_of, pages
from app.limits import qmatrix_from_csv_checked, qmatrix_from_json_checked
from app.routes.responses import ADMIN_ERRORS, AUTH_ERRORS
from app.schemas import ExtractRequest, ExtractResponse, QMatrixList, QMatrixPublic, QMatrixSummary, qmatrix_create_model
from app.schemas.common import Identifier
from app.settings import Settings
from app.storage import StoredQMatrix
from app.storage.qmatrices import MAX_VERSION
from qmatrix import QMatrix, qmatrix_to_json

router = APIRouter(prefix="/v1/qmatrices", tags=["qmatrices"])
# Its own path: under /v1/qmatrices/ it would shadow (and be shadowed by) a Q-matrix named "extract".
extractions = APIRouter(prefix="/v1/qmatrix-extractions", tags=["qmatrices"])

# ?version= is bounded to the column's range (32-bit INTEGER): a larger number could never match and made the
# database driver raise (SQLite: OverflowError past 2**63), a 500; now it is a 422 naming `version`.
_BODIES = {
    "requestBody": {
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/QMatrixCreate"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "item_id,text,<concept>..."},
                        "id": {"type": "string", "description": "defaults to the file name without extension"},
                    },
                    "required": ["file"],
                }
            },
            "text/csv": {"schema": {"type": "string"}, "description": "give the id as ?id=..."},
        },
        "required": True,
    }
}


def _public_json(stored: StoredQMatrix) -> bytes:
    q = stored.qmatrix
    return QMatrixPublic(
        **qmatrix_to_json(q), version=stored.version, n_items=len(q.items), n_concepts=len(q.concepts),
        builtin=stored.builtin,
    ).model_dump_json().encode()


def _summary(stored: StoredQMatrix) -> QMatrixSummary:
    q = stored.qmatrix
    return QMatrixSummary(id=q.id, version=stored.version, concepts=list(q.concepts), n_items=len(q.items),
                          n_concepts=len(q.concepts), builtin=stored.builtin)


async def _public(stored: StoredQMatrix, status_code: int = 200) -> Response:
    """The QMatrixPublic body, serialized in a worker thread (an item bank can be megabytes of JSON)."""
    body = await asyncio.to_thread(_public_json, stored) if len(stored.qmatrix.items) > 200 else _public_json(stored)
    return Response(content=body, status_code=status_code, media_type="application/json")


async def _parse_body(request: Request, settings: Settings, *, path_id: str | None = None) -> QMatrix:
    """The Q-matrix in the body; parsing and validation run in a worker thread (large bodies). The size limits
    are checked while parsing, so an oversized Q-matrix is refused before its rows are built."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        try:
            form = await request.form()
        except (MultipartParseError, ValueError) as exc:  # e.g. a CR inside a part's headers
            raise InputError(("body",), [f"the multipart form cannot be read: {exc}"]) from exc
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError(("body", "file"), ["upload the CSV as the form field 'file'"])
        raw_id = form.get("id")
        qid = path_id or (raw_id if isinstance(raw_id, str) and raw_id else PurePath(upload.filename or "qmatrix").stem)
        data = await upload.read()
        return await asyncio.to_thread(qmatrix_from_csv_checked, data, qid, settings, ("file",))
    if content_type == "text/csv":
        qid = path_id or request.query_params.get("id")
        if not qid:
            raise InputError(("query", "id"), ["give the Q-matrix id as ?id=... for a text/csv body"])
        return await asyncio.to_thread(qmatrix_from_csv_checked, await request.body(), qid, settings, ())
    return await asyncio.to_thread(_from_json, await request.body(), settings)


def _from_json(raw: bytes, settings: Settings) -> QMatrix:
    # The model carries this server's limits, so a list past one fails at its first extra element instead of
    # every element being validated (and listed) first.
    model = qmatrix_create_model(settings.max_qmatrix_items, settings.max_qmatrix_concepts)
    try:
        body = model.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc
    return qmatrix_from_json_checked(body.model_dump(), settings, ())


@router.post("", status_code=status.HTTP_201_CREATED, response_model=QMatrixSummary, openapi_extra=_BODIES, responses={
    **ADMIN_ERRORS, 409: {"description": "the id is taken (replace it with PUT) or built in"}, 413: {"description": "body too large"},
    422: {"description": "invalid Q-matrix; every problem is listed"},
})
async def create_qmatrix(
    request: Request, service: QMatrixServiceDep, settings: SettingsDep, principal: AdminDep,
    id: Annotated[str | None, Query(max_length=128, description="the id, for a text/csv body")] = None,
) -> QMatrixSummary:
    """Register a Q-matrix for the tenant (version 1). An id in use is 409: replace it with ``PUT``."""
    q = await _parse_body(request, settings)
    return _summary(await service.create(principal.tenant, q))


@router.put("/{qmatrix_id}", response_model=QMatrixSummary, openapi_extra=_BODIES, responses={
    **ADMIN_ERRORS, 404: {"description": "the tenant has no Q-matrix with this id"},
    409: {"description": "a built-in Q-matrix"}, 413: {"description": "body too large"},
    422: {"description": "invalid Q-matrix; every problem is listed"},
})
async def update_qmatrix(
    qmatrix_id: Identifier, request: Request, service: QMatrixServiceDep, settings: SettingsDep, principal: AdminDep
) -> QMatrixSummary:
    """Replace the rows: a new version. Calibrations fitted on the old version no longer apply to it."""
    service.check_writable(qmatrix_id)  # before the body is read
    q = await _parse_body(request, settings, path_id=qmatrix_id)
    return _summary(await service.replace(principal.tenant, q, qmatrix_id=qmatrix_id))


@router.delete("/{qmatrix_id}", status_code=status.HTTP_204_NO_CONTENT, responses={
    **ADMIN_ERRORS, 404: {"description": "the tenant has no Q-matrix with this id"},
    409: {"description": "a built-in Q-matrix"},
})
async def delete_qmatrix(qmatrix_id: Identifier, service: QMatrixServiceDep, principal: AdminDep) -> Response:
    """Delete every version (its calibrations stay readable; new diagnoses cannot name it)."""
    await service.delete(principal.tenant, qmatrix_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("", response_model=QMatrixList, responses=AUTH_ERRORS)
async def read_qmatrices(service: QMatrixServiceDep, principal: PrincipalDep, page: Annotated[Page, Depends(pages("qmatrices", int, str))]) -> QMatrixList:
    """The ids of the built-in Q-matrices, then the tenant's, by id."""
    ids = await service.ids(principal.tenant)
    chunk, last = page_of(ids, page, key=lambda qid: (0 if service.is_builtin(qid) else 1, qid))
    return QMatrixList(**page.envelope(chunk, last))


@router.get("/{qmatrix_id}", response_model=QMatrixPublic, responses={
    **AUTH_ERRORS, 404: {"description": "unknown id (another tenant's is unknown too)"},
})
async def read_qmatrix(
    qmatrix_id: Identifier, service: QMatrixServiceDep, principal: PrincipalDep,
    version: Annotated[int | None, Query(ge=1, le=MAX_VERSION, description="default: the current version")] = None,
) -> Response:
    """The current version (or ``?version=N``)."""
    return await _public(await service.get(principal.tenant, qmatrix_id, version))


@extractions.post("", response_model=ExtractResponse, responses={
    **ADMIN_ERRORS, 409: {"description": "save: the id is taken or built in"},
})
async def create_qmatrix_extraction(
    body: ExtractRequest, service: QMatrixServiceDep, settings: SettingsDep, principal: AdminDep
) -> ExtractResponse:
    """Tag items with concepts (keyword rules, LLM entities, or both with their agreement)."""
    return await service.extract(principal.tenant, body, settings)
