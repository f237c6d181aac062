"""Diagnoses for authenticated tenants: plan the request (``app.services.planning``: the Q-matrix and calibration
the tenant may use, who is asked, at what noise), charge the student's privacy budget from the plan, run it, store
the released answer.

Charging rules (README, Privacy model; the sequence itself is ``privacy.ledger.release``):

* the ledger is charged *before* any answer is released, one release per entity asked;
* after the pipeline ran, the charge is cut to the entities that actually released at least
  one concept — an entity that failed, was skipped, or answered no concept costs nothing;
* if anything goes wrong after the charge (every entity failed, a bug, a cancelled request),
  the charge is refunded: nothing was released, so nothing is spent.

Usage (tokens, dollars, cache hits; README "Cost"): every diagnosis's entity outcomes are recorded for
``GET /v1/usage`` (one insert) and counted in the metrics as soon as the pipeline returns, answered or not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass

from app.auth import Principal
from app.domain_errors import InvalidInput, TryLater, budget_retry_after
from app.metrics import count_diagnosis, count_refusal
from app.pseudonyms import cache_tag
from app.schemas import (
    BatchDiagnoseRequest,
    BatchDiagnoseResponse,
    BatchError,
    DiagnoseOptions,
    DiagnoseRequest,
    DiagnoseResponse,
    StudentIn,
    Usage,
)
from app.services.answers import budget_block, diagnosis_response, request_fingerprint
from app.services.forecasts import ForecastService
from app.services.planning import Planner, RequestConfig, StudentPlan
from app.services.usage import account_usage
from app.settings import Settings
from app.storage import UsageStore, budget_rule
from diagnosis import AllEntitiesFailed, DiagnosisResult
from diagnosis.posterior import DegeneratePosteriorError
from privacy import AnswerPending, AsyncLedger, BudgetExceeded
from providers.cache import tagged_as

__all__ = ["BatchLimits", "DiagnosisService"]


@dataclass(frozen=True)
class BatchLimits:
    """How big a batch may be, and how many of its students are diagnosed at once."""

    max_students: int
    concurrency: int

    @classmethod
    def from_settings(cls, settings: Settings) -> BatchLimits:
        return cls(max_students=settings.max_batch_size, concurrency=settings.batch_concurrency)


class DiagnosisService:
    """``/v1/diagnose`` and ``/v1/diagnose/batch``: plan, charge, run, settle. ``ledger`` None: the ledger is off."""

    def __init__(
        self, *, planner: Planner, ledger: AsyncLedger | None, usage: UsageStore, batch: BatchLimits,
        forecasts: ForecastService,
    ) -> None:
        self.planner, self.ledger, self.usage, self.batch = planner, ledger, usage, batch
        self.forecasts = forecasts

    async def diagnose(self, body: DiagnoseRequest, principal: Principal) -> DiagnoseResponse:
        tenant = principal.tenant
        config = await self._configuration(body, principal)
        q = config.resolved.qmatrix
        self.planner.check_responses(q, body.responses, ())
        items = self.forecasts.items(body.forecast_items, q)  # a bad item id is refused before any charge
        planned = self.planner.plan(body, config, body, self.planner.aggregator(body, config.calibration), tenant)
        response = await _counted(tenant, self._serve(body, config, planned))
        return await self.forecasts.attach(response, items, q=q, qmatrix_id=q.id, tenant=tenant)

    async def diagnose_batch(self, body: BatchDiagnoseRequest, principal: Principal) -> BatchDiagnoseResponse:
        if len(body.students) > self.batch.max_students:
            raise InvalidInput(("students",), [f"at most {self.batch.max_students} students per batch"])
        tenant = principal.tenant
        config = await self._configuration(body, principal)
        q = config.resolved.qmatrix
        for n, student in enumerate(body.students):
            self.planner.check_responses(q, student.responses, ("students", n))
        items = self.forecasts.items(body.forecast_items, q)
        aggregator = self.planner.aggregator(body, config.calibration)
        # Every student planned before anyone is charged: a bad entity name or a refused "none" is one refusal.
        plans = [self.planner.plan(body, config, student, aggregator, tenant) for student in body.students]
        gate = asyncio.Semaphore(self.batch.concurrency)

        async def one(student: StudentIn, planned: StudentPlan) -> DiagnoseResponse | BatchError:
            async with gate:
                try:
                    response = await _counted(tenant, self._serve(body, config, planned))
                    return await self.forecasts.attach(response, items, q=q, qmatrix_id=q.id, tenant=tenant)
                except AllEntitiesFailed as exc:
                    detail = {"message": str(exc),
                              "entities": [{"name": o.name, "reason": o.reason, "error": o.error} for o in exc.outcomes]}
                    return BatchError(student_id=student.student_id, status_code=503, detail=detail)
                except BudgetExceeded as exc:
                    return BatchError(student_id=student.student_id, status_code=429, detail=str(exc),
                                      retry_after_s=budget_retry_after(exc))

        outcomes = await asyncio.gather(*(one(s, p) for s, p in zip(body.students, plans, strict=True)))
        results = [o for o in outcomes if isinstance(o, DiagnoseResponse)]
        errors = [o for o in outcomes if isinstance(o, BatchError)]
        usage = sum((r.usage for r in results), Usage())
        return BatchDiagnoseResponse(results=results, errors=errors, count=len(results), usage=usage)

    async def _configuration(self, options: DiagnoseOptions, principal: Principal) -> RequestConfig:
        return await self.planner.configuration(
            principal, qmatrix_id=options.qmatrix_id, inline=options.qmatrix, calibration_id=options.calibration_id
        )

    async def _serve(self, options: DiagnoseOptions, config: RequestConfig, planned: StudentPlan) -> DiagnoseResponse:
        """One planned student: charged from the plan (unless unnoised or the ledger is off), run, settled."""
        plan, policy = planned.diagnosis, config.policy
        if plan.request.epsilon is None or self.ledger is None:
            return diagnosis_response(await self._run(planned), planned, options)
        try:
            async with self.ledger.releasing(
                tenant=planned.tenant, student=planned.key, cost=plan.mechanism.charge(), releases=plan.releases,
                rule=budget_rule(policy), fingerprint=request_fingerprint(planned, options, config.resolved),
                source="diagnosis",
            ) as release:
                if release.answer is not None:  # an identical request's answer: the same draw, free
                    assert release.charge is not None
                    earlier = DiagnoseResponse.model_validate_json(release.answer)
                    return earlier.model_copy(update={  # stored under the key: the caller gets its own id back
                        "student_id": plan.request.student_id, "usage": Usage(),
                        "budget": budget_block(release.charge, policy, charged=0.0, repeat=True),
                    })
                result = await self._run(planned)
                response = diagnosis_response(result, planned, options)
                released = sum(1 for o in result.entities if o.mastery)  # entities that released ≥ 1 concept
                if released:  # none: leaving unsettled refunds the charge
                    stored = response.model_copy(update={"student_id": planned.key}).model_dump_json()  # no raw id
                    settled = await release.settle(stored, released=released)
                    assert settled is not None
                    response.budget = budget_block(settled, policy, charged=settled.epsilon * settled.releases,
                                                   repeat=False)
                return response
        except AnswerPending as exc:
            raise TryLater("an identical request for this student is still being answered; retry shortly") from exc

    async def _run(self, planned: StudentPlan) -> DiagnosisResult:
        tenant = planned.tenant
        try:
            with tagged_as(cache_tag(tenant, planned.key)):  # cached answers made from these responses: erasable
                result = await self.planner.pipeline.run(planned.diagnosis)
        except AllEntitiesFailed as exc:
            await account_usage(self.usage, tenant, "diagnosis", exc.outcomes)
            raise
        except DegeneratePosteriorError as exc:
            raise InvalidInput(("aggregation",), [f"posterior aggregation impossible: {exc}"]) from exc
        await account_usage(self.usage, tenant, "diagnosis", result.entities)
        return result


async def _counted(tenant: str, diagnosis: Awaitable[DiagnoseResponse]) -> DiagnoseResponse:
    """One student's diagnosis, counted in the metrics (served, ε charged, budget warnings, 429s)."""
    try:
        response = await diagnosis
    except BudgetExceeded:
        count_refusal(tenant, "diagnosis")
        raise
    count_diagnosis(tenant, response)
    return response
