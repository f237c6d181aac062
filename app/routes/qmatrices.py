"""Q-matrices: register (JSON form, or CSV as an upload or a text/csv body) and read back."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import PurePath

from fastapi import APIRouter, Request, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.deps import FederationDep, QMatrixStoreDep
from app.errors import InputError
from app.schemas import AgreementPublic, ExtractRequest, ExtractResponse, QMatrixCreate, QMatrixList, QMatrixPublic
from diagnosis import UnknownEntities
from diagnosis.extraction import extract_qmatrix
from qmatrix.extract import GSM8K_CONCEPTS
from qmatrix import QMatrix, QMatrixError, qmatrix_from_csv_text, qmatrix_from_json, qmatrix_to_json

router = APIRouter(prefix="/v1/qmatrices", tags=["qmatrices"])

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


def _public(q: QMatrix, *, builtin: bool = False) -> QMatrixPublic:
    return QMatrixPublic(**qmatrix_to_json(q), n_items=len(q.items), n_concepts=len(q.concepts), builtin=builtin)


async def _parse_body(request: Request) -> QMatrix:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError(("body", "file"), ["upload the CSV as the form field 'file'"])
        raw_id = form.get("id")
        qid = raw_id if isinstance(raw_id, str) and raw_id else PurePath(upload.filename or "qmatrix").stem
        text = (await upload.read()).decode("utf-8-sig", errors="replace")
        return _from_csv(text, qid, ("body", "file"))
    if content_type == "text/csv":
        qid = request.query_params.get("id")
        if not qid:
            raise InputError(("query", "id"), ["give the Q-matrix id as ?id=... for a text/csv body"])
        return _from_csv((await request.body()).decode("utf-8-sig", errors="replace"), qid, ("body",))
    try:
        body = QMatrixCreate.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc
    try:
        return qmatrix_from_json(body.model_dump())
    except QMatrixError as exc:
        raise InputError(("body",), exc.problems) from exc


def _from_csv(text: str, qid: str, loc: tuple[str, ...]) -> QMatrix:
    try:
        return qmatrix_from_csv_text(text, id=qid)
    except QMatrixError as exc:
        raise InputError(loc, exc.problems) from exc


@router.post("", status_code=status.HTTP_201_CREATED, response_model=QMatrixPublic, openapi_extra=_BODIES)
async def create_qmatrix(request: Request, store: QMatrixStoreDep) -> QMatrixPublic:
    """Register a Q-matrix (replaces a stored one with the same id; built-ins cannot be replaced)."""
    q = await _parse_body(request)
    if not store.valid_id(q.id):
        raise InputError(("body", "id"), [f"id {q.id!r}: use 1-128 letters, digits, '.', '_' or '-'"])
    if store.is_builtin(q.id):
        raise InputError(("body", "id"), [f"id {q.id!r} is a built-in Q-matrix and cannot be replaced"], status_code=409)
    store.save(q)
    return _public(q)


@router.post("/extract", response_model=ExtractResponse)
async def create_qmatrix_extraction(body: ExtractRequest, store: QMatrixStoreDep, federation: FederationDep) -> ExtractResponse:
    """Tag items with concepts (keyword rules, LLM entities, or both with their agreement)."""
    concepts = body.concepts or list(GSM8K_CONCEPTS)
    if len(set(concepts)) != len(concepts):
        raise InputError(("body", "concepts"), ["concept names must be unique"])
    if len({i.id for i in body.items}) != len(body.items):
        raise InputError(("body", "items"), ["item ids must be unique"])
    entities = None
    if body.method != "keyword":
        try:
            entities = federation.pipeline.select(body.entities)
        except UnknownEntities as exc:
            raise InputError(("body", "entities"), [str(exc)]) from exc
    extraction, agreement = await extract_qmatrix(
        body.id, [(i.id, i.text) for i in body.items], concepts, method=body.method, entities=entities
    )
    registered = False
    if body.save and extraction.qmatrix is not None:
        if store.is_builtin(body.id):
            raise InputError(("body", "id"), [f"id {body.id!r} is a built-in Q-matrix"], status_code=409)
        store.save(extraction.qmatrix)
        registered = True
    return ExtractResponse(
        qmatrix=QMatrixCreate(**qmatrix_to_json(extraction.qmatrix)) if extraction.qmatrix else None,
        method=body.method,
        tags=extraction.tags,
        untagged_items=extraction.untagged_items,
        unused_concepts=extraction.unused_concepts,
        agreement=AgreementPublic(**asdict(agreement)) if agreement else None,
        failures=extraction.failures,
        registered=registered,
    )


@router.get("", response_model=QMatrixList)
async def read_qmatrices(store: QMatrixStoreDep) -> QMatrixList:
    ids = store.ids()
    return QMatrixList(data=ids, count=len(ids))


@router.get("/{qmatrix_id}", response_model=QMatrixPublic, responses={404: {"description": "unknown id"}})
async def read_qmatrix(qmatrix_id: str, store: QMatrixStoreDep) -> QMatrixPublic:
    q = store.get(qmatrix_id)
    if q is None:
        raise InputError(("path", "qmatrix_id"), [f"unknown Q-matrix id '{qmatrix_id}'"], status_code=404)
    return _public(q, builtin=store.is_builtin(q.id))
