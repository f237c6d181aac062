"""``fedcd bench cost``: what selective federation saves, measured with the held-out protocol.

* **Entities.** Tier 1 is the SIMULATED hosted family (``providers.simulated``; not LLMs), each
  priced as the hosted model it stands in for (:data:`HOSTED_STAND_INS`, prices from
  ``providers.config.DEFAULT_HOSTED``) with ESTIMATED token counts (``providers.tokens``): its dollar
  figures estimate what the real model would have cost for the same prompts. Tier 0 is ``local-fed``,
  trained federatedly on the run's train split only (``evaluation.served.train_local_fed``), free.
* **Protocol.** The held-out protocol's split, hiding, link and AUC (``evaluation.heldout``): the
  served calibration (the server's default method, fitted on the validation split at the server's
  default noise, every entity answering) is applied, and the validation and test students are
  diagnosed through ``DiagnosisPipeline.diagnose`` once per federation mode: ``all``,
  ``calibrated`` (the server's default: the entities the served calibration leaves out or weights 0
  for a student's concepts are not asked, ``CalibrationParams.unhelpful``), and ``selective`` at each
  threshold, with noise keyed by (student, entity) so the modes differ only in
  whom they ask (:func:`keyed_noise`). AUC is scored on the test students' hidden responses; cost and
  calls are averaged over every diagnosed student (validation and test). The AUC loss against ``all``
  comes with a 95 % paired-bootstrap interval over test students (``evaluation.significance``).
* **Cache.** Every student of the dataset (all responses) is asked once through the response cache
  (``providers.cache.ResponseCached``, in-process, no expiry within the run) in front of each hosted
  stand-in: the hit rate is the share of prompts identical to an earlier one.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibration import CalibrationRecord
from diagnosis import Aggregator, AllEntitiesFailed, AskAll, AskCalibrated, DiagnosisPipeline, DiagnosisRequest
from diagnosis import DiagnosisResult
from diagnosis import FederationMode, NoiseSource, Selective, build_context
from evaluation.harness import federation
from evaluation.heldout import HeldoutScorer, train_easiness, validation_truths
from evaluation.metrics import auc
from evaluation.rows import Estimates
from evaluation.served import ServedConfig, ServedValidation, local_fed_folder, served_calibration
from evaluation.significance import BOOTSTRAP_RESAMPLES, paired_bootstrap_auc
from qmatrix.splits import split_holdout, split_students
from providers import DEFAULT_EMBEDDED, DEFAULT_HOSTED, EntitySpec, build_adapter
from providers.cache import CacheKey, MemoryCacheStore, ResponseCached
from providers.wrappers import Cached
from providers.pricing import price_of
from qmatrix import Dataset, QMatrix, Response

__all__ = [
    "AUC_TOLERANCE",
    "HOSTED_STAND_INS",
    "cache_hit_rate",
    "CostBenchResult",
    "ModeRow",
    "hosted_stand_ins",
    "keyed_noise",
    "progress_total",
    "run_cost_bench",
    "thresholds_from",
]

# Each SIMULATED style stands in for one of the paper's hosted models (DEFAULT_HOSTED names).
HOSTED_STAND_INS = {"sim:confident": "gpt", "sim:conservative": "claude", "sim:specialist": "llama"}
# The target: selective may lose at most this much held-out AUC against asking all.
AUC_TOLERANCE = 0.005

Progress = Callable[[int], None]


@dataclass(frozen=True)
class ModeRow:
    """One federation mode over the diagnosed students."""

    mode: str
    threshold: float | None
    auc: float
    cost_usd_per_student: float
    paid_calls_per_student: float
    calls_per_student: float
    escalated_share: float  # students for whom more than one tier was asked
    # AUC(all) − AUC(this row) with its 95 % paired-bootstrap interval over test students (evaluation.significance)
    auc_loss: float
    auc_loss_low: float
    auc_loss_high: float
    students: int
    failed: int  # students no entity answered
    seconds: float
    # ε charged per student (released answers × ε per answer, as the ledger charges) and the diagnosis latency
    epsilon_per_student: float = 0.0
    latency_ms_p50: float = 0.0
    latency_ms_p95: float = 0.0


@dataclass
class CostBenchResult:
    dataset: str
    split: dict[str, int]
    entities: list[dict[str, Any]]
    noise: dict[str, Any]
    calibration_method: str
    rows: list[ModeRow] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    local_fed: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def baseline(self) -> ModeRow:
        return next(r for r in self.rows if r.mode == "all")

    def paid_call_cut(self, row: ModeRow) -> float:
        base = self.baseline.paid_calls_per_student
        return 1.0 - row.paid_calls_per_student / base if base > 0 else 0.0

    def recommended(self) -> ModeRow | None:
        """The selective row with the largest paid-call cut within :data:`AUC_TOLERANCE` of ``all``."""
        ok = [r for r in self.rows if r.mode == "selective" and r.auc_loss <= AUC_TOLERANCE]
        return max(ok, key=lambda r: (self.paid_call_cut(r), -(r.threshold or 0.0)), default=None)

    def to_json(self) -> dict[str, Any]:
        best = self.recommended()
        return {
            "dataset": self.dataset, "split": self.split, "entities": self.entities, "noise": self.noise,
            "calibration_method": self.calibration_method, "local_fed": self.local_fed, "seconds": round(self.seconds, 1),
            "auc_tolerance": AUC_TOLERANCE,
            "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
            "rows": [{**asdict(r), "paid_call_cut": self.paid_call_cut(r)} for r in self.rows],
            "recommended_threshold": best.threshold if best else None,
            "cache": self.cache,
        }


def hosted_stand_ins(seed: int) -> list[EntitySpec]:
    """The SIMULATED hosted family, each declared with the price (and default tier) of the model it stands in for."""
    hosted = {s.name: s for s in DEFAULT_HOSTED}
    specs = []
    for name, stands_for in HOSTED_STAND_INS.items():
        model = hosted[stands_for]
        specs.append(EntitySpec(
            name=name, kind="simulated", simulated_style=name.removeprefix("sim:"), seed=seed,  # type: ignore[arg-type]
            model=f"SIMULATED, priced as {model.model}",
            input_usd_per_mtok=model.input_usd_per_mtok, output_usd_per_mtok=model.output_usd_per_mtok,
        ))
    return specs


def _modes(thresholds: Sequence[float]) -> list[FederationMode]:
    return [AskAll(), AskCalibrated(), *(Selective(threshold=t) for t in sorted(set(thresholds)))]


def keyed_noise(seed: int) -> NoiseSource:
    """Noise keyed by (seed, student, entity): every mode privatizes an entity's answer to a student with the same
    draw, so the modes differ only in whom they ask (common random numbers)."""
    def rng(request: DiagnosisRequest, entity: str) -> np.random.Generator:
        return np.random.default_rng([seed, zlib.crc32(request.student_id.encode()), zlib.crc32(entity.encode())])

    return rng


@dataclass(frozen=True)
class _Server:
    """What every mode's diagnoses share: the pipeline (its entities swapped per mode), the Q-matrix, the served
    configuration, its calibrated aggregator and record, the concurrency gate and the progress callback."""

    pipeline: DiagnosisPipeline
    q: QMatrix
    config: ServedConfig
    aggregator: Aggregator
    record: CalibrationRecord | None
    gate: asyncio.Semaphore
    progress: Progress | None


async def _diagnose(
    server: _Server, students: Sequence[Sequence[Response]], part: str, mode: FederationMode,
) -> list[DiagnosisResult | None]:
    pipeline, q, noise, record, gate, progress = (server.pipeline, server.q, server.config.noise, server.record,
                                                  server.gate, server.progress)
    aggregator = server.aggregator

    def entities(responses: Sequence[Response]) -> list[str] | None:
        """Who the mode asks: ``calibrated`` and ``selective`` leave out what the calibration gives no weight (as the
        gateway does, ``app.services.planning.Planner``); ``all`` asks everyone."""
        if record is None or isinstance(mode, AskAll) and not isinstance(mode, AskCalibrated):
            return None
        unhelpful = record.params.unhelpful(q.concepts_for(r.item_id for r in responses))
        kept = [n for n in pipeline.entities if n not in unhelpful]
        return kept if unhelpful and kept else None

    async def one(i: int, responses: Sequence[Response]) -> DiagnosisResult | None:
        async with gate:
            request = DiagnosisRequest(
                student_id=f"{part}-{i}", qmatrix=q, responses=responses, epsilon=noise.epsilon,
                mechanism=noise.mechanism_name, sensitivity=noise.sensitivity, delta=noise.delta,  # type: ignore[arg-type]
                federation=mode, entities=entities(responses),
            )
            try:
                return await pipeline.diagnose(request, aggregator)
            except AllEntitiesFailed:
                return None
            finally:
                if progress is not None:
                    progress(1)

    return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(students))))


def _row(mode: FederationMode, results: Sequence[DiagnosisResult | None], tiers: dict[str, int], score: float,
         loss: tuple[float, float, float], seconds: float, epsilon: float | None) -> ModeRow:
    done = [r for r in results if r is not None]
    latencies = [r.latency_ms for r in done] or [0.0]
    asked = [[o for o in r.entities if o.reason not in ("skipped", "circuit_open")] for r in done]
    n = max(len(results), 1)
    return ModeRow(
        mode=mode.name, threshold=mode.threshold, auc=score, auc_loss=loss[0], auc_loss_low=loss[1],
        auc_loss_high=loss[2],
        cost_usd_per_student=sum(o.cost_usd for r in done for o in r.entities) / n,
        paid_calls_per_student=sum(1 for a in asked for o in a if tiers.get(o.name, 0) >= 1) / n,
        calls_per_student=sum(len(a) for a in asked) / n,
        escalated_share=sum(1 for r in done if r.federation.escalated) / n,
        students=len(results), failed=len(results) - len(done), seconds=seconds,
        epsilon_per_student=sum((epsilon or 0.0) for r in done for o in r.entities if o.mastery) / n,
        latency_ms_p50=float(np.percentile(latencies, 50)), latency_ms_p95=float(np.percentile(latencies, 95)),
    )


async def cache_hit_rate(dataset: Dataset, specs: Sequence[EntitySpec]) -> dict[str, Any]:
    """Every student's full prompt through the response cache in front of each hosted stand-in."""
    contexts = [build_context(dataset.qmatrix, s.responses, include_answers=False) for s in dataset.students]
    per_entity: dict[str, dict[str, float]] = {}
    for spec in specs:
        store = MemoryCacheStore(max_entries=len(contexts) + 1, ttl_s=1e9)
        cached = ResponseCached(build_adapter(spec), store, key=CacheKey.of(spec))
        answers = [await cached.respond(c) for c in contexts]
        hits = sum(1 for a in answers if a.cache == "hit")
        billed = sum(price_of(spec).cost_usd(a.usage) for a in answers)
        per_entity[spec.name] = {"lookups": len(answers), "hits": hits, "hit_rate": hits / max(len(answers), 1),
                                 "cost_usd_with_cache": billed}
    lookups = sum(v["lookups"] for v in per_entity.values())
    return {"students": len(contexts), "entities": per_entity,
            "hit_rate": sum(v["hits"] for v in per_entity.values()) / max(lookups, 1)}


async def run_cost_bench(
    dataset: Dataset, *, config: ServedConfig, thresholds: Sequence[float], seed: int, concurrency: int = 4,
    progress: Progress | None = None, embedded: bool = False,
) -> CostBenchResult:
    """The bench (module docstring). ``progress`` is called once per diagnosed student (every mode). ``embedded``:
    the embedded LLMs (SmolLM2, Gemma-3; real CPU inference, free) join tier 0 beside ``local-fed``."""
    start = time.perf_counter()
    q = dataset.qmatrix
    split = split_students(dataset.students, seed=seed)
    val_obs, val_held = split_holdout(split.validation, seed)
    test_obs, test_held = split_holdout(split.test, seed)
    specs = hosted_stand_ins(seed)
    with local_fed_folder() as folder:
        local = list(DEFAULT_EMBEDDED) if embedded else []
        fed = federation({s.name: build_adapter(s) for s in [*specs, *local]}, split.train, q, simulated=dataset.simulated,
                         served=config, seed=seed, folder=Path(folder))
        tiers = {s.name: s.tier for s in specs} | {name: 0 for name in fed.entities if name not in HOSTED_STAND_INS}
        prices = {s.name: price_of(s) for s in specs}
        # The evaluation's Cached bills a repeated prompt nothing; here every call to a paid entity is billed (the
        # response cache is measured on its own below), so the hosted stand-ins are asked bare. local-fed (free)
        # stays Cached: its answers are the same, computed once.
        members = {n: e if tiers[n] == 0 else e.inner for n, e in fed.entities.items()}
        pipeline = DiagnosisPipeline(members, tiers=tiers, prices=prices, noise=keyed_noise(seed + 7))
        gate = asyncio.Semaphore(concurrency)
        aggregator, record = await served_calibration(
            pipeline, q, validation=ServedValidation(val_obs, validation_truths(q, split.validation, val_obs)),
            level=config.noise, config=config, seed=seed, gate=gate,
        )
        scorer = HeldoutScorer(q, train_easiness(split.train), val_held, test_held)
        result = CostBenchResult(
            dataset=dataset.name, split={"train": len(split.train), "validation": len(val_obs), "test": len(test_obs)},
            entities=[{"name": n, "tier": tiers[n], "simulated": n in HOSTED_STAND_INS,
                       "stands_for": HOSTED_STAND_INS.get(n), **(asdict(prices[n]) if n in prices else {})}
                      for n in fed.entities],
            noise=config.noise.fields(), calibration_method=record.method, local_fed=fed.local_fed,
        )
        server = _Server(pipeline, q, config, aggregator, record, gate, progress)
        reference: np.ndarray | None = None  # the test P(correct) of federation all, the first mode
        for mode in _modes(thresholds):
            # Each mode asks afresh: a tier-0 answer computed for an earlier mode (or the calibration) would make this
            # mode's latency a cache lookup. The noise stays keyed; an LLM's answer is drawn again.
            pipeline.entities = {n: Cached(e.inner) if isinstance(e, Cached) else e for n, e in members.items()}
            began = time.perf_counter()
            val = await _diagnose(server, val_obs, "val", mode)
            test = await _diagnose(server, test_obs, "test", mode)
            estimates = Estimates(name=mode.name, epsilon=config.noise.epsilon,
                                  validation=[r.mastery if r else {} for r in val],
                                  test=[r.mastery if r else {} for r in test])
            probabilities, _ = scorer.probabilities(estimates)
            reference = probabilities if reference is None else reference
            loss = paired_bootstrap_auc(reference, probabilities, scorer.test_y, scorer.owner, seed=seed)
            score = auc(probabilities, scorer.test_y)
            result.rows.append(_row(mode, [*val, *test], tiers, score, loss, time.perf_counter() - began,
                                    config.noise.epsilon))
    result.cache = await cache_hit_rate(dataset, specs)
    result.seconds = time.perf_counter() - start
    return result


def progress_total(dataset: Dataset, thresholds: Sequence[float], seed: int) -> int:
    """Students diagnosed over all modes (validation and test, once per mode)."""
    split = split_students(dataset.students, seed=seed)
    return (len(split.validation) + len(split.test)) * len(_modes(thresholds))


def thresholds_from(text: str) -> list[float]:
    """Selective thresholds from ``0.5,0.8``; ``none``: no selective rows (only ``all`` and ``calibrated``)."""
    if text.strip().lower() == "none":
        return []
    values = sorted({float(t) for t in text.split(",") if t.strip()})
    if not values or any(not 0 < v <= 1 for v in values):
        raise ValueError(f"thresholds must be in (0, 1], got {text!r}")
    return values
