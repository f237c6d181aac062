"""Running students through the diagnosis pipeline for an evaluation.

Every entity is wrapped in ``Cached`` beneath the privacy wrapper, so it answers each
student's prompt once; each noise setting (mechanism, ε) then privatizes that answer
afresh, exactly as a live diagnosis would. The harness therefore measures the same
code path the API serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from diagnosis.pipeline import AllEntitiesFailed, DiagnosisPipeline, DiagnosisRequest
from privacy import Mechanism
from providers import Entity
from providers.wrappers import Cached
from qmatrix import QMatrix, Response

__all__ = ["CollectOptions", "Collected", "NoiseSetting", "collect_predictions"]

Predictions = dict[str, dict[str, float]]  # entity -> concept -> privatized value


@dataclass(frozen=True)
class NoiseSetting:
    mechanism: str  # "laplace", "gaussian", ... ; ignored when epsilon is None
    epsilon: float | None  # None: no noise (ε = ∞)
    sensitivity: str | None = None  # None: the run's sensitivity mode

    @property
    def label(self) -> str:
        return "inf" if self.epsilon is None else f"{self.epsilon:g}"


@dataclass(frozen=True, kw_only=True)
class CollectOptions:
    """How every protocol asks for answers: the sensitivity mode and δ of a setting that names none, how many
    students are diagnosed at once, and a progress callback (called with 1 per answered student and setting)."""

    sensitivity: str = "paper"
    delta: float = 1e-5
    concurrency: int = 4
    on_progress: Callable[[int], None] | None = None


@dataclass
class Collected:
    """Per noise setting, per student (in input order): the entities' privatized predictions."""

    predictions: dict[NoiseSetting, list[Predictions]] = field(default_factory=dict)
    # per noise setting, per student: the mechanism the answers were released through
    mechanisms: dict[NoiseSetting, list[Mechanism]] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # entity -> failed requests
    calls: dict[str, int] = field(default_factory=dict)  # entity -> real (uncached) requests


async def collect_predictions(
    entities: Mapping[str, Entity],
    qmatrix: QMatrix,
    students: Sequence[Sequence[Response]],
    settings: Sequence[NoiseSetting],
    *,
    seed: int | None = None,
    options: CollectOptions | None = None,
) -> Collected:
    options = options or CollectOptions()
    sensitivity, delta, on_progress = options.sensitivity, options.delta, options.on_progress
    cached = {name: Cached(entity) for name, entity in entities.items()}
    pipeline = DiagnosisPipeline(cached, seed=seed)
    out = Collected()
    gate = asyncio.Semaphore(options.concurrency)

    async def one(responses: Sequence[Response], setting: NoiseSetting) -> tuple[Predictions, Mechanism]:
        async with gate:
            request = DiagnosisRequest(
                student_id="evaluation",  # entities never see it; kept constant so prompts cache
                qmatrix=qmatrix,
                responses=responses,
                epsilon=setting.epsilon,
                mechanism=setting.mechanism,
                delta=delta,
                sensitivity=setting.sensitivity or sensitivity,  # type: ignore[arg-type]
            )
            try:
                outcomes = (await pipeline.diagnose(request)).entities
            except AllEntitiesFailed as exc:
                outcomes = exc.outcomes
            for o in outcomes:
                if o.status == "failed":
                    out.failures[o.name] = out.failures.get(o.name, 0) + 1
            if on_progress is not None:
                on_progress(1)
            answers = {o.name: o.mastery for o in outcomes if o.mastery is not None}
            return answers, pipeline.mechanism_for(request)

    # The first setting warms the cache (real calls, concurrently); the rest reuse it.
    for setting in settings:
        answered = await asyncio.gather(*(one(r, setting) for r in students))
        out.predictions[setting] = [a for a, _ in answered]
        out.mechanisms[setting] = [m for _, m in answered]
    out.calls = {name: c.misses for name, c in cached.items()}
    return out
