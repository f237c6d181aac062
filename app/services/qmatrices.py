"""A tenant's Q-matrices: register, replace (a new version), delete, list, read, and tag items with concepts
(keyword rules, LLM entities, or both). What ``/v1/qmatrices`` and ``/v1/qmatrix-extractions`` do, without HTTP:
the routes parse bodies and shape responses; this holds the rules (built-ins are read-only, ids are checked,
another tenant's Q-matrix is unknown) and is the only way they reach the store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict

from pydantic import ValidationError

from app.domain_errors import Conflict, InvalidInput, NotFound
from app.limits import qmatrix_from_json_checked
from app.schemas import AgreementPublic, ExtractRequest, ExtractResponse, QMatrixCreate, qmatrix_create_model
from app.settings import Settings
from app.services.usage import account_usage
from app.storage import QMatrixExists, QMatrixStore, StoredQMatrix, UsageStore
from diagnosis import DiagnosisPipeline, UnknownEntities
from diagnosis.extraction import extract_qmatrix
from qmatrix import QMatrix, qmatrix_to_json
from qmatrix.extract import GSM8K_CONCEPTS

__all__ = ["QMatrixService"]


def _unknown(qmatrix_id: str) -> NotFound:
    return NotFound(("qmatrix_id",), [f"unknown Q-matrix id '{qmatrix_id}'"])


class QMatrixService:
    """Over the tenant-scoped store; ``pipeline``: the federation whose entities LLM extraction asks."""

    def __init__(self, *, store: QMatrixStore, pipeline: DiagnosisPipeline, usage: UsageStore) -> None:
        self.store, self.pipeline, self.usage = store, pipeline, usage

    def check(self, q: QMatrix, *, path_id: str | None = None) -> None:
        """``InvalidInput`` for an id the store refuses, or one that is not the path's."""
        if not self.store.valid_id(q.id):
            raise InvalidInput(("id",), [f"id {q.id!r}: use 1-128 letters, digits, '.', '_' or '-', not '.' or '..'"])
        if path_id is not None and q.id != path_id:
            raise InvalidInput(("id",), [f"the body's id '{q.id}' is not the path's '{path_id}'"])

    def check_writable(self, qmatrix_id: str) -> None:
        """``Conflict`` for a built-in Q-matrix (shared, read-only)."""
        if self.store.is_builtin(qmatrix_id):
            raise Conflict(("qmatrix_id",), [f"'{qmatrix_id}' is a built-in Q-matrix"])

    def is_builtin(self, qmatrix_id: str) -> bool:
        return self.store.is_builtin(qmatrix_id)

    async def create(self, tenant: str, q: QMatrix) -> StoredQMatrix:
        """Version 1 of a new id; ``Conflict`` for an id in use (replace it instead) or built in."""
        self.check(q)
        try:
            return await asyncio.to_thread(self.store.create, tenant, q)
        except QMatrixExists as exc:
            raise Conflict(("id",), [str(exc)]) from exc

    async def replace(self, tenant: str, q: QMatrix, *, qmatrix_id: str) -> StoredQMatrix:
        """A new version of the tenant's ``qmatrix_id`` (``q`` checked against the path: :meth:`check`)."""
        self.check(q, path_id=qmatrix_id)
        stored = await asyncio.to_thread(self.store.replace, tenant, q)
        if stored is None:
            raise _unknown(qmatrix_id)
        return stored

    async def delete(self, tenant: str, qmatrix_id: str) -> None:
        """Every version (its calibrations stay readable; new diagnoses cannot name it)."""
        self.check_writable(qmatrix_id)
        if not await asyncio.to_thread(self.store.delete, tenant, qmatrix_id):
            raise _unknown(qmatrix_id)

    async def ids(self, tenant: str) -> list[str]:
        """The built-in ids and the tenant's (unordered; the route pages them)."""
        return await asyncio.to_thread(self.store.ids, tenant)

    async def get(self, tenant: str, qmatrix_id: str, version: int | None = None) -> StoredQMatrix:
        """The current version (or ``version``); ``NotFound`` for an unknown id (another tenant's is unknown too)."""
        stored = await asyncio.to_thread(self.store.get, tenant, qmatrix_id, version)
        if stored is None:
            raise _unknown(qmatrix_id)
        return stored

    async def extract(self, tenant: str, body: ExtractRequest, settings: Settings) -> ExtractResponse:
        """Tag the items with concepts; with ``save``, register the result as the tenant's (``Conflict`` when taken).
        The request is held to the settings' Q-matrix limits, and the result is checked as a registered one is."""
        concepts: Sequence[str] = body.concepts or list(GSM8K_CONCEPTS)
        for field, count, most in (("concepts", len(concepts), settings.max_qmatrix_concepts),
                                   ("items", len(body.items), settings.max_qmatrix_items)):
            if count > most:
                raise InvalidInput((field,), [f"{count} {field}; a Q-matrix has at most {most} on this server"])
        if len(set(concepts)) != len(concepts):
            raise InvalidInput(("concepts",), ["concept names must be unique"])
        if len({i.id for i in body.items}) != len(body.items):
            raise InvalidInput(("items",), ["item ids must be unique"])
        entities = None
        if body.method != "keyword":
            try:
                entities = self.pipeline.select(body.entities)
            except UnknownEntities as exc:
                raise InvalidInput(("entities",), [str(exc)]) from exc
        extraction, agreement = await extract_qmatrix(
            body.id, [(i.id, i.text) for i in body.items], list(concepts), method=body.method, entities=entities,
            ask=self.pipeline.ask, cache_scope=tenant,
        )
        if extraction.outcomes:  # the tag questions' calls, in the tenant's usage as a diagnosis's are
            await account_usage(self.usage, tenant, "extraction", extraction.outcomes)
        checked = None if extraction.qmatrix is None else await asyncio.to_thread(
            _checked, extraction.qmatrix, settings)
        registered = False
        if body.save and checked is not None:
            try:
                await asyncio.to_thread(self.store.create, tenant, checked[1])
            except QMatrixExists as exc:
                raise Conflict(("id",), [str(exc)]) from exc
            registered = True
        return ExtractResponse(
            qmatrix=None if checked is None else checked[0],
            method=body.method,
            tags=extraction.tags,
            untagged_items=extraction.untagged_items,
            unused_concepts=extraction.unused_concepts,
            agreement=AgreementPublic(**asdict(agreement)) if agreement else None,
            failures=extraction.failures,
            registered=registered,
        )


def _checked(q: QMatrix, settings: Settings) -> tuple[QMatrixCreate, QMatrix]:
    """An extracted Q-matrix through what a registered JSON one passes (the body model with the server's limits, then
    ``qmatrix_from_json_checked``): one it would refuse is a 422 here, never saved to fail on every later read (a
    500). Problems name the request field behind them: ``concepts`` (an item tagged with too many), else ``items``."""
    data = qmatrix_to_json(q)
    try:
        body = qmatrix_create_model(settings.max_qmatrix_items, settings.max_qmatrix_concepts).model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        field = "concepts" if "concepts" in errors[0]["loc"] else "items"
        raise InvalidInput((field,), [
            f"the extracted Q-matrix, {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors]) from exc
    return body, qmatrix_from_json_checked(body.model_dump(), settings, ("items",))
