"""The one way a calibration is fitted: ``/v1/calibrate`` jobs and the evaluation's ``served`` row both
run their validation students through these functions.

1. :func:`answer_validation_student` runs one student through the diagnosis pipeline at exactly the
   noise level diagnoses will use (mechanism, ε, sensitivity), and — for methods that fit on clean
   answers (the posterior's τ) — once more without noise. The pipeline's entities should be wrapped
   in ``providers.wrappers.Cached`` *beneath* the privacy wrapper, so the entity answers once and
   each release is privatized afresh.
2. :func:`validation_set` gathers the answered students into a :class:`ValidationSet`.
3. ``Calibrator.fit`` fits it (optionally with a DP release), and :func:`calibration_record` writes
   the record, which stores the noise level it was fitted for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from calibration.calibrators import FittedCalibration
from calibration.held_out import ItemCheck
from calibration.record import CalibrationRecord
from calibration.validation import Predictions, Truth, ValidationSet
from diagnosis import (
    AllEntitiesFailed,
    DiagnosisPipeline,
    DiagnosisRequest,
    EntityOutcome,
    NoiseLevel,
    answer_counts,
)
from privacy import Mechanism, mechanism_from_description
from qmatrix import QMatrix, Response

__all__ = [
    "ValidationAnswer", "ValidationStudent", "answer_validation_student", "calibration_record", "validation_set",
]


@dataclass(frozen=True)
class ValidationStudent:
    """One validation student: who (the id the pipeline and its cache see), what they answered, and the mastery
    the calibration is fitted towards (given, simulated, or the proportion-correct rule)."""

    student_id: str
    responses: Sequence[Response]
    truth: Mapping[str, float]


@dataclass
class ValidationAnswer:
    """One validation student's entity answers, released at the calibration's noise level."""

    answers: dict[str, dict[str, float]]
    mechanism: Mechanism  # the mechanism the answers were released through (stored as its description)
    truth: dict[str, float]
    clean: dict[str, dict[str, float]] | None = None  # only for methods that fit on clean answers
    failed: list[str] = field(default_factory=list)  # entities that failed for this student
    evidence: dict[str, int] = field(default_factory=dict)  # concept -> the student's answers on it
    # Every entity outcome of this student's requests (noisy and clean), for usage accounting: neither stored
    # (to_json) nor compared.
    outcomes: list[EntityOutcome] = field(default_factory=list, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"answers": self.answers, "mechanism": self.mechanism.describe(), "truth": self.truth,
                "clean": self.clean, "failed": self.failed, "evidence": self.evidence}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ValidationAnswer:
        # The stored description becomes the mechanism again here, at the storage boundary.
        return cls(answers=data["answers"], mechanism=mechanism_from_description(data["mechanism"]),
                   truth=data["truth"], clean=data.get("clean"), failed=list(data.get("failed", [])),
                   evidence=dict(data.get("evidence", {})))  # stored before counts were kept: none


async def _answers(pipeline: DiagnosisPipeline, request: DiagnosisRequest) -> list[EntityOutcome]:
    try:
        return (await pipeline.diagnose(request)).entities
    except AllEntitiesFailed as exc:
        return exc.outcomes


async def answer_validation_student(
    pipeline: DiagnosisPipeline,
    student: ValidationStudent,
    *,
    qmatrix: QMatrix,
    noise: NoiseLevel,
    keep_clean: bool,
    entities: Sequence[str] | None = None,
    cache_scope: str | None = None,
) -> ValidationAnswer:
    """The entities' answers for one validation student at ``noise`` (and clean, with ``keep_clean``);
    the student's truth is kept for the concepts their responses assess."""

    def request(level: NoiseLevel) -> DiagnosisRequest:
        return DiagnosisRequest(
            student_id=student.student_id, qmatrix=qmatrix, responses=student.responses, epsilon=level.epsilon,
            mechanism=level.mechanism_name, sensitivity=level.sensitivity,  # type: ignore[arg-type]
            delta=level.delta, entities=entities, cache_scope=cache_scope,
        )

    served = request(noise)
    outcomes = await _answers(pipeline, served)
    clean, clean_outcomes = None, outcomes
    if keep_clean:
        clean_outcomes = outcomes if noise.noiseless else await _answers(pipeline, request(NoiseLevel(sensitivity=noise.sensitivity)))
        clean = {o.name: o.mastery for o in clean_outcomes if o.mastery is not None}
    evidence = answer_counts(qmatrix.item(r.item_id).concepts for r in student.responses)
    return ValidationAnswer(
        answers={o.name: o.mastery for o in outcomes if o.mastery is not None},
        mechanism=pipeline.mechanism_for(served),
        truth={c: float(v) for c, v in student.truth.items() if c in evidence},
        evidence=evidence,
        clean=clean,
        failed=[o.name for o in outcomes if o.status == "failed"],
        outcomes=outcomes if clean_outcomes is outcomes else [*outcomes, *clean_outcomes],
    )


def validation_set(students: Sequence[ValidationAnswer], *, keep_clean: bool,
                   checks: Sequence[Sequence[ItemCheck]] | None = None) -> ValidationSet:
    """The students with at least one answer and some truth, as a :class:`ValidationSet`; every entity's failures
    over all ``students`` (the dropped ones included) go with it, for the minimum of answers a calibration asks.
    ``checks``: per student of ``students`` (same order), the responses kept back from the entities, if split."""
    if checks is not None and len(checks) != len(students):
        raise ValueError(f"{len(checks)} held-out check lists for {len(students)} validation students")
    kept = [i for i, s in enumerate(students) if s.answers and s.truth]
    usable = [students[i] for i in kept]
    if not usable:
        raise ValueError("no validation student got an answer from any entity")
    answers: list[Predictions] = [s.answers for s in usable]
    truths: list[Truth] = [s.truth for s in usable]
    mechanisms: list[Mechanism] = [s.mechanism for s in usable]
    failures: dict[str, int] = {}
    for student in students:
        for name in set(student.failed):
            failures[name] = failures.get(name, 0) + 1
    clean: list[Predictions] | None = None
    if keep_clean:
        missing = sum(1 for s in usable if s.clean is None)
        if missing:
            raise ValueError(f"{missing} validation students have no clean answers, which this method fits on")
        clean = [s.clean or {} for s in usable]
    # answer counts only when every student has them (a job resumed from answers stored before they were kept has not)
    evidence = [s.evidence for s in usable] if all(s.evidence for s in usable) else None
    return ValidationSet(
        answers=answers, truths=truths, clean=clean, mechanisms=mechanisms, failures=failures, n_asked=len(students),
        evidence=evidence, checks=None if checks is None else [checks[i] for i in kept],
    )


def calibration_record(
    fitted: FittedCalibration,
    *,
    record_id: str,
    qmatrix_id: str,
    entities: Sequence[str],
    noise: NoiseLevel,
    truth_source: str,
    n_students: int,
    version: int,
    notes: Sequence[str] = (),
    metrics: Mapping[str, float] | None = None,
) -> CalibrationRecord:
    """The record of a fitted calibration; it stores ``noise``, the level diagnoses are expected to use.
    ``notes`` and ``metrics`` are added to the fit's own (e.g. what the validation students were)."""
    return CalibrationRecord(
        id=record_id,
        qmatrix_id=qmatrix_id,
        params=fitted.params,
        entities=sorted(entities),
        epsilon=noise.epsilon,
        sensitivity=noise.sensitivity,
        mechanism=noise.mechanism_name,
        delta=noise.delta,
        truth_source=truth_source,
        n_students=n_students,
        version=version,
        metrics={**fitted.metrics, **(metrics or {})},
        notes=[*fitted.notes, *notes],
    )

