"""Cohort reports with central DP: diagnose each student privately inside the gateway (no
per-entity noise — nothing per student is released), then release only noisy aggregates.

Every student in the cohort is charged the report's ε on their ledger, all or nothing:
if any student's budget is spent, nothing is released and nothing is charged.
"""

from __future__ import annotations

import asyncio

from app.errors import InputError
from app.schemas import CohortConcept, CohortReport, CohortReportRequest
from app.settings import Settings
from app.storage import CalibrationStore, QMatrixStore
from calibration import aggregator_for
from diagnosis import AllEntitiesFailed, DiagnosisPipeline, DiagnosisRequest, UnknownEntities
from privacy import BudgetExceeded, PrivacyLedger, cohort_statistics, make_rng

__all__ = ["cohort_report"]


async def cohort_report(
    body: CohortReportRequest,
    *,
    pipeline: DiagnosisPipeline,
    qmatrices: QMatrixStore,
    calibrations: CalibrationStore,
    settings: Settings,
    ledger: PrivacyLedger | None,
    tenant: str,
) -> CohortReport:
    q = qmatrices.get(body.qmatrix_id)
    if q is None:
        raise InputError(("body", "qmatrix_id"), [f"unknown Q-matrix id '{body.qmatrix_id}'"], status_code=404)
    ids = [s.student_id for s in body.students]
    if len(set(ids)) != len(ids):
        raise InputError(("body", "students"), ["each student may appear once (contributions are bounded per student)"])
    if len(ids) < settings.min_cohort_size:
        raise InputError(("body", "students"), [f"a cohort needs at least {settings.min_cohort_size} students, got {len(ids)}"])
    for n, student in enumerate(body.students):
        unknown = q.unknown_items(r.item_id for r in student.responses)
        if unknown:
            raise InputError(("body", "students", n, "responses"), [f"unknown item ids: {', '.join(unknown)}"])
    try:
        pipeline.select(body.entities)
    except UnknownEntities as exc:
        raise InputError(("body", "entities"), [str(exc)]) from exc
    charges = []
    if ledger is not None:  # everyone pays before anything is released, or nobody does
        try:
            charges = await ledger.acharge_all(tenant=tenant, student_ids=ids, epsilon=body.epsilon, mechanism="central_laplace")
        except BudgetExceeded as exc:
            raise InputError(("body", "students"), [f"{exc}; no report was released and nobody was charged"], status_code=429) from exc
    # The same aggregation a diagnosis would use (auto: the record's, or Bayes post-processing).
    aggregator = aggregator_for(calibrations.latest_for(q.id), alpha=settings.alpha, aggregation="auto")
    gate = asyncio.Semaphore(settings.batch_concurrency)

    async def one(student) -> dict[str, float] | None:  # type: ignore[no-untyped-def]
        async with gate:
            request = DiagnosisRequest(student_id=student.student_id, qmatrix=q, responses=student.responses, epsilon=None, entities=body.entities)
            try:
                return (await pipeline.diagnose(request, aggregator)).mastery
            except AllEntitiesFailed:
                return None

    mastery = await asyncio.gather(*(one(s) for s in body.students))
    diagnosed = [m for m in mastery if m is not None]
    concepts = [c for c in q.concepts if any(c in m for m in diagnosed)]
    if not concepts:
        if ledger is not None:
            await ledger.asettle_all(charges, released=None)
        raise InputError(("body", "students"), ["no student could be diagnosed; nothing released, nothing charged"], status_code=503)
    stats, eps_stat = cohort_statistics(diagnosed, concepts, epsilon=body.epsilon, bins=body.bins, rng=make_rng(settings.noise_seed))
    if ledger is not None:
        await ledger.asettle_all(charges, released="cohort-report")
    notes = [
        "each student's diagnosis is made inside the gateway without per-entity noise and never released; "
        "only the noisy sums and histograms are",
        f"{len(ids) - len(diagnosed)} students could not be diagnosed (every entity failed) and contributed nothing"
        if len(diagnosed) < len(ids) else "every student contributed",
    ]
    return CohortReport(
        cohort_size=len(ids),
        concepts={
            c: CohortConcept(mean=s.mean, noisy_count=s.noisy_count, histogram={"bin_edges": s.bin_edges, "counts": s.counts})
            for c, s in stats.items()
        },
        epsilon=body.epsilon,
        epsilon_per_statistic=eps_stat,
        min_cohort_size=settings.min_cohort_size,
        charged_epsilon_per_student=body.epsilon if ledger is not None else 0.0,
        calibration_id=aggregator.calibration_id,
        notes=notes,
    )
