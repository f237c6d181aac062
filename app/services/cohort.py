"""Cohort reports with central DP: diagnose each student privately inside the gateway (no
per-entity noise — nothing per student is released), then release only noisy aggregates.

Every student in the cohort is charged the report's ε on their ledger, all or nothing:
if any student's budget is spent, nothing is released and nothing is charged.
The entities' usage (tokens, dollars, cache hits) of diagnosing the cohort is recorded once, after every
student was diagnosed, and returned with the report.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from app.auth import Principal
from app.domain_errors import GroupBudgetSpent, InvalidInput, Unavailable, budget_retry_after
from app.metrics import count_charge, count_refusal
from app.pseudonyms import cache_tag
from app.schemas import CohortConcept, CohortReport, CohortReportRequest, Usage
from app.services.planning import Planner, StudentPlan
from app.services.usage import account_usage
from app.settings import Settings
from app.storage import UsageStore, budget_rule, usage_total
from diagnosis import AllEntitiesFailed, EntityOutcome
from privacy import (
    COHORT_MECHANISM,
    AsyncLedger,
    BudgetExceeded,
    CohortConceptStats,
    ReleaseCost,
    cohort_statistics,
    make_rng,
)
from providers.cache import tagged_as
from qmatrix import QMatrix

__all__ = ["CohortLimits", "CohortService"]


@dataclass(frozen=True)
class CohortLimits:
    """The smallest and largest cohort described, students diagnosed at once, and the noise seed (tests only)."""

    min_size: int
    concurrency: int
    noise_seed: int | None = None
    # Every student is diagnosed by every entity: the cap bounds the entity calls one request fans out to.
    max_size: int = 1000

    @classmethod
    def from_settings(cls, settings: Settings) -> CohortLimits:
        return cls(min_size=settings.min_cohort_size, concurrency=settings.batch_concurrency,
                   noise_seed=settings.noise_seed, max_size=settings.max_cohort_size)


@dataclass(frozen=True)
class _Released:
    diagnosed: list[dict[str, float]]
    stats: dict[str, CohortConceptStats]
    epsilon_per_statistic: float
    usage: Usage


class CohortService:
    """``/v1/cohort-report``. ``ledger`` None: the ledger is off (nobody is charged)."""

    def __init__(self, *, planner: Planner, ledger: AsyncLedger | None, usage: UsageStore, limits: CohortLimits) -> None:
        self.planner, self.ledger, self.usage, self.limits = planner, ledger, usage, limits

    async def report(self, body: CohortReportRequest, principal: Principal) -> CohortReport:
        tenant, limits = principal.tenant, self.limits
        if len(body.students) > limits.max_size:  # before anything is looked up, planned or charged
            raise InvalidInput(("students",), [f"a cohort report describes at most {limits.max_size} students "
                                               f"(FEDCD_MAX_COHORT_SIZE), got {len(body.students)}: split it"])
        config = await self.planner.configuration(principal, qmatrix_id=body.qmatrix_id)
        q = config.resolved.qmatrix
        ids = [s.student_id for s in body.students]
        if len(set(ids)) != len(ids):
            raise InvalidInput(("students",), ["each student may appear once (contributions are bounded per student)"])
        if len(ids) < limits.min_size:
            raise InvalidInput(("students",), [f"a cohort needs at least {limits.min_size} students, got {len(ids)}"])
        for n, student in enumerate(body.students):
            self.planner.check_responses(q, student.responses, ("students", n))
        # The same aggregation a diagnosis would use (auto: the record's, or Bayes post-processing).
        aggregator = self.planner.aggregators.get(config.calibration, aggregation="auto", estimate="mean")
        # Planned before anyone is charged: unknown entity names are an ``InvalidInput`` that costs nobody anything.
        plans = [self.planner.cohort_plan(tenant, q, s, body.entities, aggregator) for s in body.students]
        release = self.ledger.releasing(  # everyone pays before anything is released, or nobody does
            tenant=tenant, students=[p.key for p in plans], rule=budget_rule(config.policy), source="cohort",
            cost=ReleaseCost(epsilon=body.epsilon, delta=0.0, mechanism=COHORT_MECHANISM),  # keyed hashes, never ids
        ) if self.ledger is not None else None
        try:
            async with release or contextlib.nullcontext():
                released = await self._release(body, q, plans)
                if release is not None:
                    await release.settle("cohort-report")
        except BudgetExceeded as exc:
            count_refusal(tenant, "cohort")
            raise GroupBudgetSpent(("students",), [f"{exc}; no report was released and nobody was charged"],
                                   retry_after_s=budget_retry_after(exc)) from exc
        if release is not None:
            count_charge(tenant, "cohort", body.epsilon * len(release.charges))
        diagnosed = released.diagnosed
        notes = [
            "each student's diagnosis is made inside the gateway without per-entity noise and never released; "
            "only the noisy sums and histograms are",
            f"{len(ids) - len(diagnosed)} students could not be diagnosed (every entity failed) and contributed nothing"
            if len(diagnosed) < len(ids) else "every student contributed",
        ]
        return CohortReport(
            cohort_size=len(ids),
            concepts={
                c: CohortConcept(mean=s.mean, noisy_count=s.noisy_count,
                                 histogram={"bin_edges": s.bin_edges, "counts": s.counts})
                for c, s in released.stats.items()
            },
            epsilon=body.epsilon,
            epsilon_per_statistic=released.epsilon_per_statistic,
            min_cohort_size=limits.min_size,
            charged_epsilon_per_student=body.epsilon if self.ledger is not None else 0.0,
            calibration_id=aggregator.calibration_id,
            notes=notes,
            usage=released.usage,
        )

    async def _release(self, body: CohortReportRequest, q: QMatrix, plans: Sequence[StudentPlan]) -> _Released:
        """Diagnose every student without per-entity noise, then the noisy statistics (the only thing released)."""
        gate = asyncio.Semaphore(self.limits.concurrency)
        outcomes: list[EntityOutcome] = []
        pipeline = self.planner.pipeline

        async def one(planned: StudentPlan) -> dict[str, float] | None:
            async with gate:
                try:  # cached answers made from these responses: erasable by student (app.services.students)
                    with tagged_as(cache_tag(planned.tenant, planned.key)):
                        result = await pipeline.run(planned.diagnosis)
                except AllEntitiesFailed as exc:
                    outcomes.extend(exc.outcomes)
                    return None
                outcomes.extend(result.entities)
                return result.mastery

        tenant = plans[0].tenant
        try:
            mastery = await asyncio.gather(*(one(p) for p in plans))
        finally:  # what was asked was used, whatever happens next
            await asyncio.shield(account_usage(self.usage, tenant, "cohort", outcomes))
        diagnosed = [m for m in mastery if m is not None]
        concepts = [c for c in q.concepts if any(c in m for m in diagnosed)]
        if not concepts:
            raise Unavailable(("students",), ["no student could be diagnosed; nothing released, nothing charged"])
        stats, eps_stat = cohort_statistics(
            diagnosed, concepts, epsilon=body.epsilon, bins=body.bins, rng=make_rng(self.limits.noise_seed)
        )
        return _Released(diagnosed, stats, eps_stat, usage_total(outcomes))
