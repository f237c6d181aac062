"""The ``served`` row: what ``/v1/diagnose`` returns by default, measured as served.

* ``local-fed`` is trained **federatedly on the protocol's train split only** (its students
  partitioned into simulated institutions, FedAvg, ``fedcd train``'s defaults, seeded) and joins
  the federation as an entity (:func:`train_local_fed`).
* Every answer is privatized at the server's default noise (:class:`ServedConfig`, which the CLI
  builds from ``app.settings.Settings``, so the row follows any change of default), calibrated
  on the validation split through ``calibration.fitting`` — the functions ``/v1/calibrate`` jobs
  run — and aggregated with the server's default aggregation (``aggregator_for(record, "auto")``).
* Validation and test students are then diagnosed through the same ``DiagnosisPipeline.diagnose``
  call the API makes. The row is measured twice: at the served noise, and without noise (what an
  operator gets with ``FEDCD_ALLOW_UNNOISED=true`` and ``"epsilon": "none"``; calibrated without
  noise too).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from calibration import (
    AggregationMode,
    CalibrationRecord,
    ItemCheck,
    ValidationStudent,
    aggregator_for,
    answer_validation_student,
    calibration_record,
    make_calibrator,
)
from calibration.fitting import validation_set
from diagnosis import NO_NOISE_LEVEL, Aggregator, AllEntitiesFailed, DiagnosisPipeline, DiagnosisRequest, NoiseLevel
from evaluation.rows import Estimates
from federated import ModelRegistry, PublishOptions, TrainingConfig, train_federated
from federated.models import AUTO, TRAINABLE_KINDS
from providers import Entity
from providers.local_fed import LocalFedEntity
from qmatrix import Dataset, QMatrix, Response, StudentResponses

__all__ = [
    "HeldoutStudents",
    "LocalFedTraining",
    "ServedConfig",
    "ServedRowSource",
    "ServedValidation",
    "served_calibration",
    "served_estimates",
    "train_local_fed",
]

Mastery = dict[str, float]


@dataclass(frozen=True, kw_only=True)
class LocalFedTraining:
    """How the evaluation trains ``local-fed``: ``fedcd train``'s defaults (FedAvg, IID, no DP) unless set.

    ``rounds=0`` serves the model at its seeded initial weights (untrained: what training adds is
    measured against it); ``clients=1`` is centralized training; ``epsilon`` trains with
    student-level DP-SGD at that budget (δ = 1e-5).
    """

    clients: int = 3
    rounds: int = 10
    local_epochs: int = 2
    model: str = AUTO  # as upload-and-train serves: the best kind on the coordinator's held-out students
    epsilon: float | None = None
    threads: int = 2

    def __post_init__(self) -> None:
        if self.clients < 1 or self.rounds < 0 or self.local_epochs < 1:
            raise ValueError(f"local-fed training needs clients >= 1, rounds >= 0, local_epochs >= 1: {self}")
        if self.model not in TRAINABLE_KINDS:
            raise ValueError(f"local-fed model must be one of {', '.join(TRAINABLE_KINDS)}, got {self.model!r}")
        if self.epsilon is not None and not self.epsilon > 0:
            raise ValueError(f"local-fed epsilon must be > 0, got {self.epsilon}")

    def training_config(self, seed: int) -> TrainingConfig:
        """These settings as ``federated.train_federated``'s configuration (its defaults for the rest)."""
        return TrainingConfig(clients=self.clients, rounds=self.rounds, local_epochs=self.local_epochs,
                              threads=self.threads, model_kind=self.model, seed=seed,
                              dp="student" if self.epsilon is not None else "none", epsilon=self.epsilon)

    def publish_options(self) -> PublishOptions:
        """The untrained model is published only to be measured, hence ``force`` when no round runs."""
        return PublishOptions(force=self.rounds == 0)

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "clients": self.clients, "rounds": self.rounds, "local_epochs": self.local_epochs,
                "dp": "student" if self.epsilon is not None else "none", "epsilon": self.epsilon}


@dataclass(frozen=True, kw_only=True)
class ServedConfig:
    """The server's defaults that decide what ``/v1/diagnose`` returns."""

    noise: NoiseLevel
    calibration_method: str = "stacking"
    aggregation: AggregationMode = "auto"
    release_epsilon: float | None = None  # DP release of the calibration (None: released without noise)
    local_fed: LocalFedTraining | None = field(default_factory=LocalFedTraining)  # None: no local-fed member


@dataclass(frozen=True)
class ServedValidation:
    """The validation students a served calibration is fitted on (input order): the responses the entities answer,
    each student's truth, and where their responses were split, the checks of those kept back (a DP release's guard
    scores its candidates' forecasts of them, :mod:`calibration.held_out`, as the calibrate job keeps them back)."""

    responses: Sequence[Sequence[Response]]
    truths: Sequence[Mastery]
    checks: Sequence[Sequence[ItemCheck]] | None = None


@dataclass(frozen=True)
class HeldoutStudents:
    """What a row measured through the API is given: the Q-matrix, the tenant's history (the train and validation
    students, all their responses: what a platform would upload) and the observed responses of the validation and
    test students it diagnoses (input order). The test students are never in the history."""

    qmatrix: QMatrix
    history: Sequence[StudentResponses]
    validation: Sequence[Sequence[Response]]
    test: Sequence[Sequence[Response]]


class ServedRowSource(Protocol):
    """Builds a served row elsewhere than in this process (``evaluation.served_api``: upload, train and diagnose
    through a gateway process it starts); the evaluation scores it like every other row. The evaluation never imports
    the gateway: it speaks to it over HTTP."""

    async def __call__(self, students: HeldoutStudents) -> Estimates: ...


@dataclass
class ServedRun:
    """The served rows' estimates and what each calibration fitted (for the report)."""

    estimates: list[Estimates]
    calibrations: list[dict[str, Any]]


def train_local_fed(
    train: Sequence[StudentResponses], q: QMatrix, *, simulated: bool, training: LocalFedTraining, seed: int,
    folder: Path,
) -> tuple[LocalFedEntity, dict[str, Any]]:
    """``local-fed`` trained across ``training.clients`` simulated institutions on ``train`` only; the
    entity serves the signed model from a registry in ``folder``."""
    dataset = Dataset(name=f"{q.id}-train", qmatrix=q, students=list(train), simulated=simulated)
    result = train_federated(dataset=dataset, registry=folder, config=training.training_config(seed),
                             publish=training.publish_options())
    if not result.published:
        raise RuntimeError(f"local-fed was not published: {result.decision}")
    entity = LocalFedEntity(registry=ModelRegistry(folder))
    entity.load()
    spent = result.epsilon if training.epsilon is not None else None  # every candidate kind's rounds composed
    facts = {**training.describe(), "version": result.version, "train_students": len(train),
             "rounds": len(result.history), "epsilon_spent": spent,
             "kind": (result.selection or {}).get("chosen", training.model),
             "trainer_heldout_auc": result.heldout_metrics.get("auc"), "seconds": round(result.seconds, 1)}
    return entity, facts


@dataclass(frozen=True)
class _Diagnosed:
    """What the served rows keep of each student's diagnosis: the mastery, its credible intervals and their level."""

    mastery: list[Mastery]
    intervals: list[dict[str, tuple[float, float]]]
    level: float | None


async def _diagnose_all(
    pipeline: DiagnosisPipeline, q: QMatrix, students: Sequence[Sequence[Response]], level: NoiseLevel,
    aggregator: Aggregator, gate: asyncio.Semaphore,
) -> _Diagnosed:
    async def one(i: int, responses: Sequence[Response]) -> tuple[Mastery, dict[str, tuple[float, float]], float | None]:
        async with gate:
            request = DiagnosisRequest(
                student_id=f"served-{i}", qmatrix=q, responses=responses, epsilon=level.epsilon,
                mechanism=level.mechanism_name, sensitivity=level.sensitivity, delta=level.delta,  # type: ignore[arg-type]
            )
            try:
                result = await pipeline.diagnose(request, aggregator)
            except AllEntitiesFailed:
                return {}, {}, None
            return result.mastery, dict(result.intervals), result.interval_level

    done = await asyncio.gather(*(one(i, r) for i, r in enumerate(students)))
    levels = {lv for _, _, lv in done if lv is not None}
    return _Diagnosed([m for m, _, _ in done], [iv for _, iv, _ in done], levels.pop() if len(levels) == 1 else None)


async def served_estimates(
    entities: Mapping[str, Entity],
    q: QMatrix,
    *,
    validation: ServedValidation,
    test: Sequence[Sequence[Response]],
    config: ServedConfig,
    seed: int,
    concurrency: int = 4,
) -> ServedRun:
    """The ``served`` rows at ``config.noise`` and without noise (see the module docstring).

    ``entities`` should be ``Cached`` (shared with the rest of the evaluation) so no entity is
    asked twice; every release is privatized afresh, as live diagnoses are.
    """
    pipeline = DiagnosisPipeline(dict(entities), seed=seed + 7)
    gate = asyncio.Semaphore(concurrency)
    run = ServedRun(estimates=[], calibrations=[])
    for level in (config.noise, NO_NOISE_LEVEL):
        aggregator, record = await served_calibration(
            pipeline, q, validation=validation, level=level, config=config, seed=seed, gate=gate,
        )
        tested = await _diagnose_all(pipeline, q, test, level, aggregator, gate)
        run.estimates.append(Estimates(
            name="served", epsilon=level.epsilon,
            validation=(await _diagnose_all(pipeline, q, validation.responses, level, aggregator, gate)).mastery,
            test=tested.mastery, mechanism=level.mechanism_name,
            test_intervals=tested.intervals if tested.level is not None else None, interval_level=tested.level,
            forecast_averages=aggregator.kind == "posterior",  # as the API forecasts (diagnosis.forecast)
        ))
        run.calibrations.append({"noise": level.fields(), "method": record.method, "aggregation": aggregator.kind,
                                 "metrics": record.metrics, "params": _summary(record.params.to_json()),
                                 "notes": record.notes})
    return run


async def served_calibration(
    pipeline: DiagnosisPipeline,
    q: QMatrix,
    *,
    validation: ServedValidation,
    level: NoiseLevel,
    config: ServedConfig,
    seed: int,
    gate: asyncio.Semaphore,
) -> tuple[Aggregator, CalibrationRecord]:
    """The served calibration at ``level``: every pipeline entity answers the validation students (privatized
    at ``level``), ``config.calibration_method`` is fitted as ``/v1/calibrate`` fits it, and the aggregator is
    the server's default for that record (``aggregator_for(record, config.aggregation)``)."""
    calibrator = make_calibrator(config.calibration_method)

    async def answer(i: int, responses: Sequence[Response], truth: Mastery):  # type: ignore[no-untyped-def]
        async with gate:
            return await answer_validation_student(
                pipeline, ValidationStudent(f"validation-{i}", responses, truth), qmatrix=q, noise=level,
                keep_clean=calibrator.fits_clean_answers,
            )

    answers = await asyncio.gather(*(answer(i, r, t) for i, (r, t) in enumerate(
        zip(validation.responses, validation.truths, strict=True))))
    data = validation_set(answers, keep_clean=calibrator.fits_clean_answers, checks=validation.checks)
    fitted = calibrator.fit(data, release_epsilon=config.release_epsilon, rng=np.random.default_rng(seed))
    record = calibration_record(
        fitted, record_id=f"served-{'inf' if level.noiseless else level.epsilon}", qmatrix_id=q.id,
        entities=list(pipeline.entities), noise=level, truth_source="evaluation validation split", n_students=len(data),
        version=1,
    )
    return aggregator_for(record, aggregation=config.aggregation), record


def _summary(params: dict[str, Any]) -> dict[str, Any]:
    """What a report shows of the fitted parameters: pooled weights in full, per-concept ones as a count."""
    out = {k: v for k, v in params.items() if not isinstance(v, dict) or k in ("pooled_weights", "entity_error_sd")}
    for k, v in params.items():
        if isinstance(v, dict) and k not in out:
            out[f"{k}_count"] = len(v)
    return out


def local_fed_folder() -> tempfile.TemporaryDirectory[str]:
    """A temporary registry for the evaluation's own local-fed model (never the gateway's)."""
    return tempfile.TemporaryDirectory(prefix="fedcd-eval-local-fed-")
