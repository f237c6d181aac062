"""Turning API requests into pipeline requests and pipeline results into API responses."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence

from app.errors import InputError
from app.schemas import (
    BatchDiagnoseRequest,
    BatchDiagnoseResponse,
    BatchError,
    BudgetBlock,
    DiagnoseRequest,
    DiagnoseResponse,
    EntityReport,
    PrivacyBlock,
    SkippedEntity,
    StudentIn,
    _DiagnoseOptions,
)
from app.settings import Settings
from app.storage import CalibrationStore, QMatrixStore
from calibration import (
    Aggregator,
    CalibrationRecord,
    AllEntitiesFailed,
    DiagnosisPipeline,
    DiagnosisRequest,
    DiagnosisResult,
    UnknownEntities,
    aggregator_for,
)
from calibration.posterior import DegeneratePosteriorError, PosteriorAggregator
from privacy import BudgetExceeded, PrivacyLedger, charge_parameters
from qmatrix import QMatrix, QMatrixError, Response, qmatrix_from_json, qmatrix_to_json

__all__ = ["diagnose_batch", "diagnose_one", "resolve_qmatrix"]


def resolve_qmatrix(options: _DiagnoseOptions, store: QMatrixStore) -> QMatrix:
    if options.qmatrix is not None:
        try:
            return qmatrix_from_json(options.qmatrix.model_dump())
        except QMatrixError as exc:
            raise InputError(("body", "qmatrix"), exc.problems) from exc
    assert options.qmatrix_id is not None
    q = store.get(options.qmatrix_id)
    if q is None:
        raise InputError(("body", "qmatrix_id"), [f"unknown Q-matrix id '{options.qmatrix_id}'"], status_code=404)
    return q


def _check_items(q: QMatrix, responses: Sequence[Response], loc: tuple[str | int, ...]) -> None:
    unknown = q.unknown_items(r.item_id for r in responses)
    if unknown:
        raise InputError(
            (*loc, "responses"),
            [f"unknown item ids for Q-matrix '{q.id}': {', '.join(unknown)}"],
            extra={"unknown_item_ids": unknown},
        )


def _aggregator(
    options: _DiagnoseOptions, q: QMatrix, calibrations: CalibrationStore, settings: Settings, entities: Sequence[str]
) -> Aggregator:
    return aggregator_for(
        _record(options, q, calibrations), alpha=settings.alpha, aggregation=options.aggregation,
        estimate=options.estimate, entities=entities,
    )


def _record(options: _DiagnoseOptions, q: QMatrix, calibrations: CalibrationStore) -> CalibrationRecord | None:
    if options.calibration_id is not None:
        record = calibrations.get(options.calibration_id)
        if record is None:
            raise InputError(("body", "calibration_id"), [f"unknown calibration id '{options.calibration_id}'"])
        if record.qmatrix_id != q.id:
            raise InputError(
                ("body", "calibration_id"),
                [f"calibration '{record.id}' was fitted for Q-matrix '{record.qmatrix_id}', not '{q.id}'"],
            )
        return record
    return calibrations.latest_for(q.id)


def _to_response(
    result: DiagnosisResult, *, include_entities: bool, sensitivity_mode: str, aggregation: str
) -> DiagnoseResponse:
    return DiagnoseResponse(
        student_id=result.student_id,
        mastery=result.mastery,
        missing_concepts=result.missing_concepts,
        entities=[EntityReport(**vars(o)) for o in result.entities] if include_entities else None,
        failed_entities=[o.name for o in result.entities if o.status == "failed"],
        skipped_entities=[SkippedEntity(name=o.name, reason=o.error or "") for o in result.entities if o.status == "skipped"],
        privacy=PrivacyBlock(**result.privacy, sensitivity_mode=sensitivity_mode),  # type: ignore[arg-type]
        mastery_interval=result.intervals or None,
        interval_level=result.interval_level,
        aggregation=aggregation,
        calibration_id=result.calibration_id,
        request_id=result.request_id,
        latency_ms=result.latency_ms,
    )


def _epsilon(options: _DiagnoseOptions, settings: Settings) -> float | None:
    if options.epsilon == "none":
        return None
    return float(options.epsilon) if options.epsilon is not None else settings.default_epsilon


def _fingerprint(request: DiagnosisRequest, options: _DiagnoseOptions, calibration_id: str | None) -> str:
    """The canonical content of a request: equal fingerprints get the same answer within the repeat window."""
    content = {
        "qmatrix": qmatrix_to_json(request.qmatrix),
        "responses": [r.model_dump(mode="json") for r in request.responses],
        "epsilon": request.epsilon,
        "delta": request.delta,
        "mechanism": request.mechanism,  # resolved (server default applied)
        "sensitivity": request.sensitivity,
        "entities": sorted(request.entities) if request.entities is not None else None,
        "calibration_id": calibration_id,
        "include_entities": options.include_entities,
        "aggregation": options.aggregation,
        "estimate": options.estimate,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def _run(
    pipeline: DiagnosisPipeline,
    options: _DiagnoseOptions,
    q: QMatrix,
    student: StudentIn | DiagnoseRequest,
    aggregator: Aggregator,
    settings: Settings,
    ledger: PrivacyLedger | None = None,
    tenant: str = "default",
) -> DiagnoseResponse:
    """Charge the student's privacy budget, diagnose, store the released answer (or refund if none)."""
    request = _request(options, student, q, settings)
    try:
        selected = pipeline.select(options.entities)
    except UnknownEntities as exc:
        raise InputError(("body", "entities"), [str(exc)]) from exc
    if request.epsilon is None:
        if not settings.allow_unnoised:
            raise InputError(
                ("body", "epsilon"),
                ['"none" would release raw answers with unbounded privacy cost; this server refuses it '
                 "(FEDCD_ALLOW_UNNOISED=true allows it)"],
            )
        return await _diagnose(pipeline, request, aggregator, options)
    if ledger is None:
        return await _diagnose(pipeline, request, aggregator, options)
    cost = charge_parameters(pipeline.mechanism_for(request))
    fingerprint = _fingerprint(request, options, aggregator.calibration_id)
    for _ in range(2):  # a second pass only when an identical in-flight request was refunded
        charge = await ledger.acharge(
            tenant=tenant,
            student_id=request.student_id,
            epsilon=cost["epsilon"],
            delta=cost["delta"],
            mechanism=cost["mechanism"],
            request_fingerprint=fingerprint,
            releases=len(selected),
            sigma_over_sensitivity=cost["sigma_over_sensitivity"],
        )
        if not charge.repeat:
            break
        stored = charge.answer_json if not charge.pending else await ledger.await_answer(charge.id)
        if stored is not None:
            earlier = DiagnoseResponse.model_validate_json(stored)
            budget = BudgetBlock(
                tenant=tenant, charged_epsilon=0.0, spent_epsilon=charge.spent_epsilon,
                remaining_epsilon=charge.remaining_epsilon, cap_epsilon=ledger.cap_epsilon, repeat=True,
            )
            return earlier.model_copy(update={"budget": budget})
    try:
        response = await _diagnose(pipeline, request, aggregator, options)
    except AllEntitiesFailed:
        await ledger.arefund(charge.id)  # nothing was released, so nothing is spent
        raise
    response.budget = BudgetBlock(
        tenant=tenant, charged_epsilon=charge.epsilon * charge.releases, spent_epsilon=charge.spent_epsilon,
        remaining_epsilon=charge.remaining_epsilon, cap_epsilon=ledger.cap_epsilon, repeat=False,
    )
    await ledger.astore_answer(charge.id, response.model_dump_json())
    return response


async def _diagnose(
    pipeline: DiagnosisPipeline, request: DiagnosisRequest, aggregator: Aggregator, options: _DiagnoseOptions
) -> DiagnoseResponse:
    try:
        result = await pipeline.diagnose(request, aggregator)
    except DegeneratePosteriorError as exc:
        raise InputError(("body", "aggregation"), [f"posterior aggregation impossible: {exc}"]) from exc
    name = "posterior" if isinstance(aggregator, PosteriorAggregator) else "mean"
    return _to_response(result, include_entities=options.include_entities, sensitivity_mode=request.sensitivity, aggregation=name)


def _request(
    options: _DiagnoseOptions, student: StudentIn | DiagnoseRequest, q: QMatrix, settings: Settings
) -> DiagnosisRequest:
    mode = options.sensitivity or settings.sensitivity
    return DiagnosisRequest(
        student_id=student.student_id,
        qmatrix=q,
        responses=student.responses,
        epsilon=_epsilon(options, settings),
        sensitivity=mode,
        mechanism=options.mechanism or settings.default_mechanism,
        delta=options.delta,
        entities=options.entities,
        include_answers=settings.send_answer_text,
    )


async def diagnose_one(
    body: DiagnoseRequest,
    *,
    pipeline: DiagnosisPipeline,
    qmatrices: QMatrixStore,
    calibrations: CalibrationStore,
    settings: Settings,
    ledger: PrivacyLedger | None = None,
    tenant: str = "default",
) -> DiagnoseResponse:
    q = resolve_qmatrix(body, qmatrices)
    _check_items(q, body.responses, ("body",))
    aggregator = _aggregator(body, q, calibrations, settings, list(body.entities or pipeline.entities))
    return await _run(pipeline, body, q, body, aggregator, settings, ledger, tenant)


async def diagnose_batch(
    body: BatchDiagnoseRequest,
    *,
    pipeline: DiagnosisPipeline,
    qmatrices: QMatrixStore,
    calibrations: CalibrationStore,
    settings: Settings,
    ledger: PrivacyLedger | None = None,
    tenant: str = "default",
) -> BatchDiagnoseResponse:
    if len(body.students) > settings.max_batch_size:
        raise InputError(("body", "students"), [f"at most {settings.max_batch_size} students per batch"])
    q = resolve_qmatrix(body, qmatrices)
    for n, student in enumerate(body.students):
        _check_items(q, student.responses, ("body", "students", n))
    aggregator = _aggregator(body, q, calibrations, settings, list(body.entities or pipeline.entities))
    if body.entities is not None:
        try:
            pipeline.select(body.entities)
        except UnknownEntities as exc:
            raise InputError(("body", "entities"), [str(exc)]) from exc
    if body.epsilon == "none" and not settings.allow_unnoised:
        raise InputError(("body", "epsilon"), ['"none" would release raw answers; this server refuses it'])
    gate = asyncio.Semaphore(settings.batch_concurrency)

    async def one(student: StudentIn) -> DiagnoseResponse | BatchError:
        async with gate:
            try:
                return await _run(pipeline, body, q, student, aggregator, settings, ledger, tenant)
            except AllEntitiesFailed as exc:
                detail = {"message": str(exc), "entities": [{"name": o.name, "error": o.error} for o in exc.outcomes]}
                return BatchError(student_id=student.student_id, status_code=503, detail=detail)
            except BudgetExceeded as exc:
                return BatchError(student_id=student.student_id, status_code=429, detail=str(exc))

    outcomes = await asyncio.gather(*(one(s) for s in body.students))
    results = [o for o in outcomes if isinstance(o, DiagnoseResponse)]
    errors = [o for o in outcomes if isinstance(o, BatchError)]
    return BatchDiagnoseResponse(results=results, errors=errors, count=len(results))
