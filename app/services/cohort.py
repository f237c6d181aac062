"""Cohort reports with central DP: diagnose each student privately inside the gateway (no
per-entity noise — nothing per student is released), then release only noisy aggregates.

Every student in the cohort is charged the report's ε on their ledger, all or nothing:
if any student's budget is spent, nothing is released and nothing is charged.
The entities' usage (tokens, dollars, cache hits) of diagnosing the cohort is recorded once, after every
student was diagnosed, and returned with the report.
"""

from __future__ import annotations

import asyncio

from app.auth import Principal
from app.errors import InputError, budget_retry_after
from app.metrics import count_charge, count_refusal
from app.pseudonyms import cache_tag
from app.schemas import CohortConcept, CohortReport, CohortReportRequest, StudentIn, Usage
from app.services.diagnosis import DiagnosisService
from app.storage import budget_rule, usage_total
from calibration import aggregator_for
from diagnosis import AllEntitiesFailed, DiagnosisRequest, EntityOutcome
from privacy import BudgetExceeded, CohortConceptStats, cohort_statistics, make_rng
from providers.cache import tagged_as
from qmatrix import QMatrix

__all__ = ["cohort_report"]


async def cohort_report(body: CohortReportRequest, *, service: DiagnosisService, principal: Principal) -> CohortReport:
    settings, ledger, pipeline, tenant = service.settings, service.ledger, service.pipeline, principal.tenant
    stored = await asyncio.to_thread(service.qmatrices.get, tenant, body.qmatrix_id)
    if stored is None:
        raise InputError(("body", "qmatrix_id"), [f"unknown Q-matrix id '{body.qmatrix_id}'"], status_code=404)
    q = stored.qmatrix
    ids = [s.student_id for s in body.students]
    if len(set(ids)) != len(ids):
        raise InputError(("body", "students"), ["each student may appear once (contributions are bounded per student)"])
    if len(ids) < settings.min_cohort_size:
        raise InputError(("body", "students"), [f"a cohort needs at least {settings.min_cohort_size} students, got {len(ids)}"])
    for n, student in enumerate(body.students):
        service.check_responses(q, student.responses, ("body", "students", n))
    service.select(body.entities)  # unknown names are a 422 before anyone is charged
    charges = []
    if ledger is not None:  # everyone pays before anything is released, or nobody does
        try:
            rule = budget_rule(await service.policy(tenant))
            charges = await ledger.acharge_all(  # under keyed hashes, never the ids (app.pseudonyms)
                tenant=tenant, student_ids=[service.pseudonyms.key(tenant, i) for i in ids], epsilon=body.epsilon,
                mechanism="central_laplace", rule=rule, source="cohort",
            )
        except BudgetExceeded as exc:
            count_refusal(tenant, "cohort")
            retry_after = budget_retry_after(exc)
            raise InputError(
                ("body", "students"), [f"{exc}; no report was released and nobody was charged"], status_code=429,
                extra={"type": "privacy_budget", "retry_after_s": retry_after}, retry_after_s=retry_after,
            ) from exc
    try:
        diagnosed, stats, eps_stat, calibration_id, usage = await _release(body, service, q, stored.version, tenant)
    except BaseException:
        if charges:
            await asyncio.shield(ledger.asettle_all(charges, released=None))  # type: ignore[union-attr]  # nothing released
        raise
    if charges:
        await ledger.asettle_all(charges, released="cohort-report")  # type: ignore[union-attr]
        count_charge(tenant, "cohort", body.epsilon * len(charges))
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
        calibration_id=calibration_id,
        notes=notes,
        usage=usage,
    )


async def _release(
    body: CohortReportRequest, service: DiagnosisService, q: QMatrix, version: int, tenant: str
) -> tuple[list[dict[str, float]], dict[str, CohortConceptStats], float, str | None, Usage]:
    """Diagnose every student without per-entity noise, then the noisy statistics (the only thing released)."""
    settings, pipeline = service.settings, service.pipeline
    # The same aggregation a diagnosis would use (auto: the record's, or Bayes post-processing).
    latest = await asyncio.to_thread(service.calibrations.latest_for, tenant, q.id, version)
    aggregator = aggregator_for(latest.record if latest else None, alpha=settings.alpha, aggregation="auto")
    gate = asyncio.Semaphore(settings.batch_concurrency)
    outcomes: list[EntityOutcome] = []

    async def one(student: StudentIn) -> dict[str, float] | None:
        async with gate:
            request = DiagnosisRequest(
                student_id=student.student_id, qmatrix=q, responses=student.responses, epsilon=None,
                entities=body.entities, cache_scope=tenant,
            )
            try:  # cached answers made from these responses: erasable by student (app.services.students)
                with tagged_as(cache_tag(tenant, service.pseudonyms.key(tenant, student.student_id))):
                    result = await pipeline.diagnose(request, aggregator)
            except AllEntitiesFailed as exc:
                outcomes.extend(exc.outcomes)
                return None
            outcomes.extend(result.entities)
            return result.mastery

    try:
        mastery = await asyncio.gather(*(one(s) for s in body.students))
    finally:  # what was asked was used, whatever happens next
        await asyncio.shield(service.account(tenant, "cohort", outcomes))
    diagnosed = [m for m in mastery if m is not None]
    concepts = [c for c in q.concepts if any(c in m for m in diagnosed)]
    if not concepts:
        raise InputError(("body", "students"), ["no student could be diagnosed; nothing released, nothing charged"], status_code=503)
    stats, eps_stat = cohort_statistics(
        diagnosed, concepts, epsilon=body.epsilon, bins=body.bins, rng=make_rng(settings.noise_seed)
    )
    return diagnosed, stats, eps_stat, aggregator.calibration_id, usage_total(outcomes)
