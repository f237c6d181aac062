"""The one diagnosis pipeline: fan out → privatize → aggregate.

The API, the CLI and the evaluation harness all call ``DiagnosisPipeline.diagnose`` (or, to read the
plan before running it — the gateway charges the privacy budget from it — ``plan`` then ``run``:
:mod:`diagnosis.plan`); it knows nothing of HTTP. The request's federation mode (:mod:`diagnosis.tiers`) orders the
selected entities into stages — one stage of all of them, or tier by tier — and the pipeline
aggregates every answer so far after each stage until the mode says it is enough. All stages
share the request's one deadline (``DiagnosisRequest.deadline_s``): each entity call is bounded
by the time left, and a stage that would start after it is not asked. The entities of a stage
are asked concurrently; each answer is privatized by
``Privatized`` *inside* that entity's task, so the raw (pre-noise) prediction never
leaves the entity boundary — it is not returned, stored or logged. Failed entities are
left out of the average and named with their reason; an entity that raises
``EntitySkipped`` (it cannot serve this request at all, e.g. no model for the Q-matrix) is
reported as ``skipped`` with the reason, and is not a failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TypeVar

import numpy as np

from diagnosis.aggregation import Aggregation, Aggregator, ResidualAggregator
from diagnosis.calibrated import calibration_mismatch
from diagnosis.measured import MEASURED_LEVEL, MeasuredError, answer_counts, measured_intervals
from diagnosis.plan import DiagnosisPlan, DiagnosisRequest, UnknownEntities, build_context, request_mechanism
from diagnosis.posterior import UncertainAnswer
from diagnosis.results import AllEntitiesFailed, DiagnosisResult, EntityOutcome, NoEntitySelected
from diagnosis.tiers import FederationReport, Stage, StageReport
from privacy import Mechanism, make_rng
from providers import Entity, EntityError, EntityPrediction, EntitySkipped, PromptContext, WithDeadline
from providers.pricing import FREE, Price

# Also importable from here, where they were defined before diagnosis.plan and diagnosis.results.
__all__ = [
    "AllEntitiesFailed",
    "DiagnosisPipeline",
    "DiagnosisPlan",
    "DiagnosisRequest",
    "DiagnosisResult",
    "EntityOutcome",
    "NoEntitySelected",
    "NoiseSource",
    "Privatized",
    "UnknownEntities",
    "build_context",
]

log = logging.getLogger("fedcd.pipeline")

# Aggregations over more (concept × entity) cells than this run in a worker thread; smaller ones inline,
# where a thread hop would cost more than the work.
_INLINE_CELLS = 256

T = TypeVar("T")


class Privatized:
    """An entity whose answers are released only through ``mechanism`` (the paper's local DP).

    Like Flower's ``LocalDpMod``: the wrapped entity answers, the mechanism perturbs, and
    only the perturbed copy is returned.
    """

    def __init__(self, inner: Entity, mechanism: Mechanism, rng: np.random.Generator) -> None:
        self.inner, self.mechanism, self._rng = inner, mechanism, rng
        self.name = inner.name

    async def respond(self, context: PromptContext) -> EntityPrediction:
        raw = await self.inner.respond(context)
        noisy = self.mechanism.privatize(raw.mastery, self._rng)
        return raw.model_copy(update={"mastery": noisy, "privatized": self.mechanism.adds_noise})

    async def aclose(self) -> None:
        await self.inner.aclose()


# (request, entity name) -> the generator that entity's answer to the request is privatized with.
NoiseSource = Callable[[DiagnosisRequest, str], np.random.Generator]


async def off_loop(cells: int, work: Callable[[], T], inline_cells: int = _INLINE_CELLS) -> T:
    """``work()`` inline when small; in a worker thread when it covers more than ``inline_cells`` cells, so a
    large diagnosis does not hold the event loop (other requests, /healthz) for its grid work."""
    if cells <= inline_cells:
        return work()
    return await asyncio.to_thread(work)


def _repair_counts(prediction: EntityPrediction) -> dict[str, int]:
    counts: dict[str, int] = {}
    for repair in prediction.repairs:
        counts[repair.rule] = counts.get(repair.rule, 0) + 1
    return counts


class DiagnosisPipeline:
    """Holds the configured entities, their tiers and prices; ``diagnose`` runs one request through them.

    ``tiers``: entity -> tier (``EntitySpec.tier``); an entity not listed (one passed ready-made,
    without a declaration) is tier 0. ``prices``: each entity's price (``providers.pricing``); an
    entity not in it is free (tests, evaluation runs), so its answers report tokens and a cost of 0.
    ``noise``: the generator each (request, entity) answer is privatized with — benchmarks pass one
    keyed by student and entity, so two runs that ask an entity the same question draw the same noise
    whatever else they ask (common random numbers); by default every answer draws from the
    pipeline's one generator.
    """

    def __init__(
        self,
        entities: Mapping[str, Entity],
        *,
        seed: int | None = None,
        tiers: Mapping[str, int] | None = None,
        prices: Mapping[str, Price] | None = None,
        noise: NoiseSource | None = None,
    ) -> None:
        self.entities = dict(entities)
        self.tiers = dict(tiers or {})
        self.prices = dict(prices or {})
        # One generator per pipeline, seeded from the OS CSPRNG (or a test seed).
        self._rng = make_rng(seed)
        self._noise = noise

    def select(self, names: Sequence[str] | None) -> dict[str, Entity]:
        if names is None:
            return dict(self.entities)
        unknown = [n for n in names if n not in self.entities]
        if unknown:
            raise UnknownEntities(unknown, list(self.entities))
        return {n: self.entities[n] for n in dict.fromkeys(names)}

    async def ask(self, entity: Entity, context: PromptContext) -> EntityOutcome:
        """``entity``'s answer to ``context`` as an outcome, its usage priced; an entity's failure is an outcome too
        (never raised). The one way an entity is asked, so every call is priced and counted alike."""
        start = time.perf_counter()
        try:
            prediction = await entity.respond(context)
        except EntitySkipped as exc:
            return EntityOutcome(
                name=entity.name, status="skipped", latency_ms=(time.perf_counter() - start) * 1000, error=str(exc),
                reason=exc.code,
            )
        except EntityError as exc:
            log.warning("entity %s failed: %s", entity.name, exc.reason)
            return EntityOutcome(
                name=entity.name, status="failed", latency_ms=(time.perf_counter() - start) * 1000, error=exc.reason,
                reason=exc.code, prompt_tokens=exc.usage.prompt_tokens, completion_tokens=exc.usage.completion_tokens,
                cost_usd=self.prices.get(entity.name, FREE).cost_usd(exc.usage),
            )
        return EntityOutcome(
            name=entity.name,
            status=prediction.status,
            latency_ms=(time.perf_counter() - start) * 1000,
            mastery=prediction.mastery,
            missing=prediction.missing,
            model=prediction.model,
            attempts=prediction.attempts,
            repairs=_repair_counts(prediction),
            prompt_tokens=prediction.usage.prompt_tokens,
            completion_tokens=prediction.usage.completion_tokens,
            cost_usd=self.prices.get(entity.name, FREE).cost_usd(prediction.usage),
            cache=prediction.cache,
            uncertainty=prediction.uncertainty,
        )

    def mechanism_for(self, request: DiagnosisRequest) -> Mechanism:
        """The privacy mechanism this request's answers will be released through (built once per parameters:
        the registry reuses it, so a plan and whoever reads the request's mechanism see the same object)."""
        return request_mechanism(request)

    def plan(self, request: DiagnosisRequest, aggregator: Aggregator | None = None) -> DiagnosisPlan:
        """The request decided: its prompt context, mechanism, federation mode, entities and deadline, with
        ``aggregator`` (default: the uncalibrated residual mean). Raises ``QMatrixError`` (unknown items),
        :class:`UnknownEntities`, or :class:`NoEntitySelected` when there is no entity to ask."""
        aggregator = aggregator or ResidualAggregator()
        context = build_context(
            request.qmatrix, request.responses, include_answers=request.include_answers, cache_scope=request.cache_scope,
            # an entity's own uncertainty is computed only when something reads it (local-fed's costs 11 Cholesky
            # solves per student): the aggregation, or a selective federation's gauge
            own_uncertainty=aggregator.reads_uncertainty or request.federation.reads_uncertainty,
        )
        selected = self.select(request.entities)
        if not selected:
            raise NoEntitySelected("the federation has no entities" if request.entities is None or not self.entities
                                   else "the request names none")
        return DiagnosisPlan(
            request=request,
            context=context,
            # the one object privatizing, modelled and described below (and charged for, by the gateway)
            mechanism=request_mechanism(request, len(context.concepts)),
            mode=request.federation,
            entities=selected,
            aggregator=aggregator,
            deadline_s=request.deadline_s,
        )

    async def diagnose(self, request: DiagnosisRequest, aggregator: Aggregator | None = None) -> DiagnosisResult:
        """Plan the request and run the plan."""
        return await self.run(self.plan(request, aggregator))

    async def run(self, plan: DiagnosisPlan) -> DiagnosisResult:
        """Ask the plan's entities stage by stage, privatize each answer, aggregate (see the module docstring)."""
        start = time.perf_counter()
        deadline = None if plan.deadline_s is None else time.monotonic() + plan.deadline_s
        request, context, mechanism, mode, aggregator = (
            plan.request, plan.context, plan.mechanism, plan.mode, plan.aggregator
        )
        report = FederationReport(mode=mode.name, threshold=mode.threshold)
        outcomes: list[EntityOutcome] = []
        aggregation: Aggregation | None = None
        stages = mode.stages({name: self.tiers.get(name, 0) for name in plan.entities})
        for n, stage in enumerate(stages):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                report.stages.append(StageReport(
                    tier=stage.tier, entities=stage.entities, decision="deadline",
                    reason="not asked: the request's deadline had passed",
                ))
                break
            asked = await self._ask_stage(plan, stage, left)
            outcomes.extend(asked)
            if not any(o.mastery for o in asked):
                report.stages.append(StageReport(
                    tier=stage.tier, entities=stage.entities, decision="tier failed",
                    reason="tier failed: " + ("; ".join(f"{o.name} {o.reason or o.status}" for o in asked) or "no entity"),
                ))
                continue
            # each answer carries the entity's own uncertainty, where it has one (diagnosis.posterior.spread)
            answered = {o.name: UncertainAnswer(o.mastery, o.uncertainty) for o in outcomes if o.mastery is not None}
            cells = len(context.concepts) * len(answered)
            aggregation = await off_loop(
                cells, partial(aggregator.aggregate, answered, context.concepts, mechanism=mechanism)
            )
            if n == len(stages) - 1 and stage.tier is not None:
                report.stages.append(StageReport(tier=stage.tier, entities=stage.entities, decision="last tier",
                                                 reason="last tier: no more entities to ask"))
                break
            verdict = await off_loop(
                cells if mode.gauge_needed(aggregation) else 0,
                partial(mode.verdict, aggregation, answered, context.concepts, mechanism=mechanism),
            )
            report.stages.append(StageReport(tier=stage.tier, entities=stage.entities, decision=verdict.decision,
                                             reason=verdict.reason, widest=verdict.widest))
            if verdict.enough:
                break
        if aggregation is None:
            raise AllEntitiesFailed(outcomes)
        measured: MeasuredError | None = None
        if not aggregation.intervals and aggregator.measured_error is not None:
            # a calibrated mean's intervals, from its measured error and this student's answers (diagnosis.measured)
            counts = answer_counts(item.concepts for item in context.items)
            intervals = measured_intervals(aggregation.mastery, aggregator.measured_error, counts, MEASURED_LEVEL,
                                           aggregation.contributors)
            aggregation = replace(aggregation, level=MEASURED_LEVEL if intervals else None, intervals=intervals)
            measured = aggregator.measured_error if intervals else None  # so a stored diagnosis can re-read them
        calibration = aggregator.calibration
        return DiagnosisResult(
            student_id=request.student_id,
            request_id=request.request_id,
            concepts=context.concepts,
            mastery=aggregation.mastery,
            missing_concepts=aggregation.missing,
            entities=outcomes,
            privacy=mechanism.describe(),
            calibration_id=aggregator.calibration_id,
            latency_ms=(time.perf_counter() - start) * 1000,
            intervals={c: (float(lo), float(hi)) for c, (lo, hi) in aggregation.intervals.items()},
            interval_level=aggregation.level,
            interval_error=measured,
            aggregation=aggregator.kind,
            calibration_mismatch=calibration_mismatch(calibration.noise, request.noise) if calibration else None,
            federation=report,
        )

    async def _ask_stage(self, plan: DiagnosisPlan, stage: Stage, left: float | None) -> list[EntityOutcome]:
        """The stage's entities, concurrently, each bounded by the time left of the request's deadline."""
        def guarded(name: str) -> Privatized:
            entity = plan.entities[name] if left is None else WithDeadline(plan.entities[name], left)
            rng = self._rng if self._noise is None else self._noise(plan.request, name)
            return Privatized(entity, plan.mechanism, rng)

        return list(await asyncio.gather(*(self.ask(guarded(name), plan.context) for name in stage.entities)))

    async def aclose(self) -> None:
        await asyncio.gather(*(e.aclose() for e in self.entities.values()), return_exceptions=True)
