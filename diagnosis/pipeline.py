"""The one diagnosis pipeline: fan out → privatize → aggregate.

The API, the CLI and the evaluation harness all call ``DiagnosisPipeline.diagnose``; it
knows nothing of HTTP. The request's federation mode (:mod:`diagnosis.tiers`) orders the
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
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, TypeVar

import numpy as np

from diagnosis.aggregation import Aggregation, Aggregator, ResidualAggregator
from diagnosis.calibrated import NoiseLevel, calibration_mismatch
from diagnosis.tiers import AskAll, FederationMode, FederationReport, Stage, StageReport
from privacy import DEFAULT_DELTA, PAPER_MECHANISM, Mechanism, SensitivityMode, make_rng, mechanism_for_request
from providers import Entity, EntityError, EntityPrediction, EntitySkipped, PromptContext, PromptItem, WithDeadline
from providers.pricing import FREE, Price
from qmatrix import QMatrix, Response

__all__ = [
    "AllEntitiesFailed",
    "DiagnosisPipeline",
    "DiagnosisRequest",
    "DiagnosisResult",
    "EntityOutcome",
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


class UnknownEntities(ValueError):
    def __init__(self, names: Sequence[str], known: Sequence[str]) -> None:
        self.names = list(names)
        super().__init__(f"unknown entities: {', '.join(names)} (configured: {', '.join(known) or 'none'})")


@dataclass(frozen=True, kw_only=True)
class DiagnosisRequest:
    student_id: str
    qmatrix: QMatrix
    responses: Sequence[Response]
    epsilon: float | None = 1.0  # None: the caller asked for no noise
    sensitivity: SensitivityMode = "paper"
    mechanism: str = PAPER_MECHANISM  # privacy.MECHANISM_NAMES; the paper's Laplace by default
    delta: float = DEFAULT_DELTA  # used by the Gaussian mechanism only
    entities: Sequence[str] | None = None  # None: every configured entity
    include_answers: bool = False  # send free-text answers to the entities (off: data minimisation)
    federation: FederationMode = field(default_factory=AskAll)  # which entities are asked, in what order
    deadline_s: float | None = None  # one deadline for the whole request, every stage included; None: none
    cache_scope: str | None = None  # who may share cached entity answers (the tenant); see PromptContext
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def noise(self) -> NoiseLevel:
        return NoiseLevel(mechanism=self.mechanism, epsilon=self.epsilon, sensitivity=self.sensitivity, delta=self.delta)


@dataclass(frozen=True)
class EntityOutcome:
    """What one entity contributed to a diagnosis. ``mastery`` is privatized; raw values are never kept.

    ``skipped``: the entity could not serve the request at all; ``mastery`` is None and
    ``error`` holds the reason. ``reason`` is the reason class of a failed or skipped entity
    (``EntityError.code``: unavailable, timeout, rejected, parse_error, circuit_open, skipped).

    Usage: the tokens the provider reported for the call, every attempt included, and their price
    (``cost_usd``); a failed call counts what its provider reported before failing (an unreadable answer
    was billed; a timeout or refusal reports nothing: 0). ``cache``: ``hit``/``miss`` from a response
    cache in front of the entity, None without one; a hit used no tokens and costs nothing."""

    name: str
    status: Literal["ok", "partial", "failed", "skipped"]
    latency_ms: float
    mastery: dict[str, float] | None = None
    missing: list[str] = field(default_factory=list)
    error: str | None = None
    reason: str | None = None
    model: str = ""
    attempts: int = 0
    repairs: dict[str, int] = field(default_factory=dict)  # repair rule -> count
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache: Literal["hit", "miss"] | None = None


@dataclass(frozen=True)
class DiagnosisResult:
    student_id: str
    request_id: str
    concepts: tuple[str, ...]
    mastery: dict[str, float]
    missing_concepts: list[str]
    entities: list[EntityOutcome]
    privacy: dict[str, object]
    calibration_id: str | None
    latency_ms: float
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # Bayes post-processing only
    interval_level: float | None = None
    aggregation: str = "mean"  # the aggregator's kind: mean or posterior
    # field -> {"calibrated": ..., "served": ...} where this request's noise differs from the calibration's
    calibration_mismatch: dict[str, dict[str, object]] | None = None
    federation: FederationReport = field(default_factory=lambda: FederationReport(mode="all"))


# (request, entity name) -> the generator that entity's answer to the request is privatized with.
NoiseSource = Callable[[DiagnosisRequest, str], np.random.Generator]


class AllEntitiesFailed(RuntimeError):
    """No entity produced a usable answer; ``outcomes`` holds each entity's reason."""

    def __init__(self, outcomes: Sequence[EntityOutcome]) -> None:
        self.outcomes = list(outcomes)
        reasons = "; ".join(f"{o.name} ({o.status}): {o.error}" for o in outcomes) or "no entities selected"
        super().__init__(f"no entity answered ({reasons})")


def build_context(
    qmatrix: QMatrix, responses: Sequence[Response], *, include_answers: bool = True, cache_scope: str | None = None
) -> PromptContext:
    """Q-filtered prompt context. Raises ``QMatrixError`` naming unknown item ids.

    Data minimisation: the context holds the answered items' text, their Q-matrix rows
    and correctness — never the student id. Free-text answers are included only when
    ``include_answers`` (they may hold names or other identifying text).
    """
    concepts = qmatrix.concepts_for([r.item_id for r in responses])
    items = tuple(
        PromptItem(
            item_id=r.item_id,
            text=qmatrix.item(r.item_id).text,
            concepts=qmatrix.item(r.item_id).concepts,
            score=r.score,
            answer=r.answer if include_answers else None,
        )
        for r in responses
    )
    return PromptContext(concepts=concepts, items=items, qmatrix_id=qmatrix.id, cache_scope=cache_scope)


async def _off_loop(cells: int, work: Callable[[], T]) -> T:
    """``work()`` inline when small; in a worker thread when it covers more than ``_INLINE_CELLS`` cells, so a
    large diagnosis does not hold the event loop (other requests, /healthz) for its grid work."""
    if cells <= _INLINE_CELLS:
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

    async def _ask(self, entity: Entity, context: PromptContext) -> EntityOutcome:
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
        )

    def mechanism_for(self, request: DiagnosisRequest) -> Mechanism:
        """The privacy mechanism this request's answers will be released through (built once per parameters:
        the registry reuses it, so the service's charge and the release see the same object)."""
        return mechanism_for_request(
            name=request.mechanism,
            epsilon=request.epsilon,
            delta=request.delta,
            mode=request.sensitivity,
            n_concepts_total=len(request.qmatrix.concepts),
            n_concepts_assessed=len(request.qmatrix.concepts_for([r.item_id for r in request.responses])),
        )

    async def diagnose(self, request: DiagnosisRequest, aggregator: Aggregator | None = None) -> DiagnosisResult:
        start = time.perf_counter()
        deadline = None if request.deadline_s is None else time.monotonic() + request.deadline_s
        aggregator = aggregator or ResidualAggregator()
        context = build_context(
            request.qmatrix, request.responses, include_answers=request.include_answers, cache_scope=request.cache_scope
        )
        selected = self.select(request.entities)
        mechanism = self.mechanism_for(request)  # the one object privatizing, modelled and described below
        mode = request.federation
        report = FederationReport(mode=mode.name, threshold=mode.threshold)
        outcomes: list[EntityOutcome] = []
        aggregation: Aggregation | None = None
        stages = mode.stages({name: self.tiers.get(name, 0) for name in selected})
        for n, stage in enumerate(stages):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                report.stages.append(StageReport(
                    tier=stage.tier, entities=stage.entities, decision="deadline",
                    reason="not asked: the request's deadline had passed",
                ))
                break
            asked = await self._ask_stage(request, stage, selected, mechanism, context, left)
            outcomes.extend(asked)
            if not any(o.mastery for o in asked):
                report.stages.append(StageReport(
                    tier=stage.tier, entities=stage.entities, decision="tier failed",
                    reason="tier failed: " + ("; ".join(f"{o.name} {o.reason or o.status}" for o in asked) or "no entity"),
                ))
                continue
            answered = {o.name: o.mastery for o in outcomes if o.mastery is not None}
            cells = len(context.concepts) * len(answered)
            aggregation = await _off_loop(
                cells, partial(aggregator.aggregate, answered, context.concepts, mechanism=mechanism)
            )
            if n == len(stages) - 1 and stage.tier is not None:
                report.stages.append(StageReport(tier=stage.tier, entities=stage.entities, decision="last tier",
                                                 reason="last tier: no more entities to ask"))
                break
            verdict = await _off_loop(
                cells if mode.gauge_needed(aggregation) else 0,
                partial(mode.verdict, aggregation, answered, context.concepts, mechanism=mechanism),
            )
            report.stages.append(StageReport(tier=stage.tier, entities=stage.entities, decision=verdict.decision,
                                             reason=verdict.reason, widest=verdict.widest))
            if verdict.enough:
                break
        if aggregation is None:
            raise AllEntitiesFailed(outcomes)
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
            aggregation=aggregator.kind,
            calibration_mismatch=calibration_mismatch(calibration.noise, request.noise) if calibration else None,
            federation=report,
        )

    async def _ask_stage(
        self, request: DiagnosisRequest, stage: Stage, selected: Mapping[str, Entity], mechanism: Mechanism,
        context: PromptContext, left: float | None,
    ) -> list[EntityOutcome]:
        """The stage's entities, concurrently, each bounded by the time left of the request's deadline."""
        def guarded(name: str) -> Privatized:
            entity = selected[name] if left is None else WithDeadline(selected[name], left)
            rng = self._rng if self._noise is None else self._noise(request, name)
            return Privatized(entity, mechanism, rng)

        return list(await asyncio.gather(*(self._ask(guarded(name), context) for name in stage.entities)))

    async def aclose(self) -> None:
        await asyncio.gather(*(e.aclose() for e in self.entities.values()), return_exceptions=True)
