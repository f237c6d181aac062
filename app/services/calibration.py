"""``/v1/calibrate`` jobs: run the diagnosis pipeline over a validation split, then fit a calibrator.

The validation students go through the same pipeline as a diagnosis, at the noise level
diagnoses use (mechanism, ε, sensitivity: the request's, else the server defaults), so the
calibration is fitted on the kind of answers it will correct, and the record stores that level
(``calibration.fitting``: the evaluation's ``served`` row fits through the same functions). Entity answers are cached within the job (beneath the privacy wrapper, so each
reuse is privatized afresh). Each finished student is stored at once; a job cut off by a
restart resumes where it stopped.

The ``synthetic`` dataset simulates SIMULATED DINA students on the request's own Q-matrix (the example when it
names none), with their simulated mastery as the truth, so any Q-matrix can be calibrated before real data
exists; the job's notes and metrics and the record say the students were SIMULATED. Entities with fewer than
``FEDCD_CALIBRATION_MIN_ANSWERS`` successful validation answers are left out of the fit (``calibration.exclusion``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.db import SHARED_TENANT
from app.errors import InputError
from app.federation import Federation
from app.limits import check_responses
from app.metrics import count_charge
from app.pseudonyms import Pseudonyms, cache_tag
from app.schemas import CalibrateRequest, DatasetRef, PrivacyPolicy
from app.services.jobs import JobContext, JobRunner
from app.services.usage import account_usage
from app.settings import Settings
from app.storage import CalibrationStore, PolicyStore, QMatrixStore, StoredQMatrix, UsageStore, budget_rule
from calibration import TooFewAnswers, make_calibrator
from calibration.fitting import ValidationAnswer, answer_validation_student, calibration_record, validation_set
from diagnosis import DiagnosisPipeline, NoiseLevel, UnknownEntities
from privacy import AsyncLedger, ReleaseCost, make_rng
from providers.cache import tagged_as
from providers.wrappers import Cached
from qmatrix import EXAMPLE_QMATRIX_ID, Response, load_dataset, proportion_correct_truth, split_students
from qmatrix.simulate import DINA_GUESS, DINA_MASTERY_RATE, DINA_SLIP

__all__ = ["CalibrationService", "start_default_calibration"]

log = logging.getLogger("fedcd.calibration")


@dataclass
class _Students:
    """A job's validation students and what the record must say about them."""

    stored: StoredQMatrix
    rows: list[dict[str, Any]]  # [{student_id, responses, truth|None}]
    truth_source: str
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


class CalibrationService:
    def __init__(
        self,
        *,
        federation: Federation,
        qmatrices: QMatrixStore,
        calibrations: CalibrationStore,
        jobs: JobRunner,
        policies: PolicyStore,
        settings: Settings,
        usage: UsageStore,
        pseudonyms: Pseudonyms,
        ledger: AsyncLedger | None = None,
    ) -> None:
        self.federation, self.qmatrices, self.calibrations, self.settings = federation, qmatrices, calibrations, settings
        self.jobs, self.ledger, self.policies, self.usage = jobs, ledger, policies, usage
        self.pseudonyms = pseudonyms
        jobs.register("calibrate", self.run)

    def check(self, body: CalibrateRequest, tenant: str) -> None:
        """Refuse bad input now (422 naming the field, 404 for an unknown Q-matrix), not minutes later in the job."""
        method = body.method or self.settings.default_calibration_method
        if body.isotonic and method != "stacking":
            raise InputError(("body", "isotonic"), [f"isotonic maps apply to method 'stacking' only, not '{method}'"])
        if body.entities is not None:
            try:
                self.federation.pipeline.select(body.entities)
            except UnknownEntities as exc:
                raise InputError(("body", "entities"), [str(exc)]) from exc
        if body.records is None:
            simulated_on = body.qmatrix_id if body.dataset is not None and body.dataset.name == "synthetic" else None
            if simulated_on is not None and self.qmatrices.get(tenant, simulated_on) is None:  # it must exist
                raise InputError(("body", "qmatrix_id"), [f"unknown Q-matrix id '{simulated_on}'"], status_code=404)
            return
        if len(body.records) > self.settings.max_calibration_records:
            raise InputError(("body", "records"), [f"at most {self.settings.max_calibration_records} records"])
        stored = self.qmatrices.get(tenant, body.qmatrix_id or "")
        if stored is None:
            raise InputError(("body", "qmatrix_id"), [f"unknown Q-matrix id '{body.qmatrix_id}'"], status_code=404)
        q = stored.qmatrix
        for n, record in enumerate(body.records):
            check_responses(q, record.responses, self.settings, ("body", "records", n))
            bad = [c for c in (record.truth or {}) if c not in q.concepts]
            if bad:
                raise InputError(("body", "records", n, "truth"), [f"unknown concepts: {', '.join(bad)}"])

    async def submit(self, body: CalibrateRequest, tenant: str) -> str:
        await asyncio.to_thread(self.check, body, tenant)
        request = body.model_dump(mode="json")
        for record in request["records"] or []:
            # The job's input is stored: it keeps the keyed hash, never the id (app.pseudonyms). The job charges and
            # tags cache entries under it as it is; nothing it returns names a student.
            record["student_id"] = self.pseudonyms.key(tenant, record["student_id"])
        return self.jobs.submit("calibrate", request, tenant=tenant)

    def _students(self, request: CalibrateRequest, tenant: str) -> _Students:
        if request.records is not None:
            stored = self.qmatrices.get(tenant, request.qmatrix_id or "")
            if stored is None:
                raise ValueError(f"unknown Q-matrix id '{request.qmatrix_id}'")
            rows = [
                {"student_id": r.student_id, "responses": r.responses, "truth": r.truth} for r in request.records
            ]
            source = "provided" if all(r.truth is not None for r in request.records) else (
                "proportion-correct" if all(r.truth is None for r in request.records) else "mixed"
            )
            return _Students(stored, rows, source)
        assert request.dataset is not None
        ref = request.dataset
        if ref.name == "synthetic":
            return self._simulated(request, tenant)
        dataset = load_dataset(
            ref.name, data_dir=self.settings.data_dir, max_students=ref.max_students, seed=ref.seed
        )
        if request.qmatrix_id is not None and request.qmatrix_id != dataset.qmatrix.id:
            raise ValueError(f"dataset '{ref.name}' uses Q-matrix '{dataset.qmatrix.id}', not '{request.qmatrix_id}'")
        if self.qmatrices.is_builtin(dataset.qmatrix.id):
            stored = self.qmatrices.get(tenant, dataset.qmatrix.id)
            assert stored is not None
        else:
            stored = self.qmatrices.ensure(tenant, dataset.qmatrix)  # so the tenant's diagnoses can name it
        part = split_students(dataset.students, seed=ref.seed).part(ref.part)
        rows = [
            {"student_id": s.student_id, "responses": s.responses, "truth": dataset.true_mastery.get(s.student_id)}
            for s in part
        ]
        return _Students(stored, rows, "simulated-true-mastery" if dataset.simulated else "proportion-correct",
                         simulated=dataset.simulated)

    def _simulated(self, request: CalibrateRequest, tenant: str) -> _Students:
        """SIMULATED DINA students on the request's own Q-matrix (the example when it names none), seeded by the
        dataset's seed; their simulated mastery is the truth. A resumed job simulates the same students again."""
        assert request.dataset is not None
        ref = request.dataset
        stored = self.qmatrices.get(tenant, request.qmatrix_id or EXAMPLE_QMATRIX_ID)
        if stored is None:
            raise ValueError(f"unknown Q-matrix id '{request.qmatrix_id}'")
        q = stored.qmatrix
        # A simulated student answers no more items than a diagnosis accepts, drawn at random from a large bank.
        per_student = min(len(q.items), self.settings.max_responses_per_student)
        dataset = load_dataset(
            "synthetic", qmatrix=q, max_students=ref.max_students, seed=ref.seed,
            synthetic_items=per_student if per_student < len(q.items) else None,
        )
        part = split_students(dataset.students, seed=ref.seed).part(ref.part)
        rows = [
            {"student_id": s.student_id, "responses": s.responses, "truth": dataset.true_mastery[s.student_id]}
            for s in part
        ]
        note = (
            f"SIMULATED validation students: {len(rows)} DINA students (the {ref.part} part of {len(dataset.students)}, "
            f"seed {ref.seed}; slip {DINA_SLIP:g}, guess {DINA_GUESS:g}, mastery rate {DINA_MASTERY_RATE:g}; {per_student} "
            f"of {len(q.items)} items each) on "
            f"Q-matrix '{q.id}' version {stored.version}, their simulated mastery the truth: this calibration describes "
            "how the entities read simulated students, not real ones; refit on real validation students when you have them"
        )
        return _Students(stored, rows, "simulated-true-mastery", simulated=True, notes=[note],
                         metrics={"simulated_students": float(len(rows))})

    def _release_epsilon(self, request: CalibrateRequest, simulated: bool) -> float | None:
        """ε the fitted parameters are released with: the request's; omitted, none for SIMULATED students (there is
        nobody to protect, and noise would only blur a fit on few students), else the server default."""
        if request.release_epsilon == "none":
            return None
        if request.release_epsilon is not None:
            return float(request.release_epsilon)
        return None if simulated else self.settings.calibration_release_epsilon

    @staticmethod
    def _noise(request: CalibrateRequest, policy: PrivacyPolicy) -> NoiseLevel:
        """The noise the validation answers are privatized at: the request's, else what the tenant's diagnoses use."""
        epsilon = None if request.epsilon == "none" else (
            float(request.epsilon) if request.epsilon is not None else policy.default_epsilon
        )
        return NoiseLevel(
            mechanism=request.mechanism or policy.default_mechanism, epsilon=epsilon,
            sensitivity=request.sensitivity or policy.sensitivity, delta=request.delta,
        )

    async def run(self, raw_request: dict[str, Any], job: JobContext) -> dict[str, Any]:
        start = time.perf_counter()
        tenant = job.tenant
        request = CalibrateRequest.model_validate(raw_request)
        students = await asyncio.to_thread(self._students, request, tenant)
        stored, rows = students.stored, students.rows
        q = stored.qmatrix
        job.set_total(len(rows))
        policy = await asyncio.to_thread(self.policies.current, tenant)
        noise = self._noise(request, policy)
        calibrator = make_calibrator(
            request.method or self.settings.default_calibration_method, **({"isotonic": True} if request.isotonic else {})
        )
        selected = self.federation.pipeline.select(request.entities)
        # Cached beneath Privatized: repeated identical prompts are answered once per job.
        pipeline = DiagnosisPipeline(
            {n: Cached(e) for n, e in selected.items()}, seed=self.settings.noise_seed,
            prices=self.federation.pipeline.prices,
        )
        # Items stored in another form (by an earlier version) are answered again rather than misread.
        finished = {i: v for i, v in job.finished_items().items() if "answers" in v}
        failures: dict[str, int] = {}
        for item in finished.values():
            for name in item.get("failed", []):
                failures[name] = failures.get(name, 0) + 1
        gate = asyncio.Semaphore(self.settings.batch_concurrency)

        async def one(idx: int, row: dict[str, Any]) -> None:
            async with gate:
                responses: list[Response] = list(row["responses"])
                # A tenant's own students (records: keyed already) tag the cached answers made from their responses.
                with tagged_as(cache_tag(tenant, row["student_id"]) if request.records is not None else None):
                    answer = await answer_validation_student(
                        pipeline, qmatrix=q, student_id=row["student_id"], responses=responses,
                        truth=row["truth"] or proportion_correct_truth(q, responses), noise=noise,
                        keep_clean=calibrator.fits_clean_answers, cache_scope=tenant,
                    )
                await account_usage(self.usage, tenant, "calibration", answer.outcomes, job_id=job.job_id)
                for name in answer.failed:
                    failures[name] = failures.get(name, 0) + 1
                job.record_item(idx, answer.to_json(), failed_entities=failures)
                finished[idx] = answer.to_json()

        await asyncio.gather(*(one(i, row) for i, row in enumerate(rows) if i not in finished))
        try:
            data = validation_set(
                [ValidationAnswer.from_json(finished[i]) for i in sorted(finished)], keep_clean=calibrator.fits_clean_answers
            )
        except ValueError as exc:
            raise RuntimeError(f"{exc} (failures: {failures})") from exc
        release = self._release_epsilon(request, students.simulated)
        paid = None
        if release is not None and request.records is not None and self.ledger is not None:
            # Every validation student pays the release ε before anything is released, or nobody does
            # (privacy.ledger.release: refunded unless the record is saved and released).
            paid = self.ledger.releasing(
                tenant=tenant, students=[r.student_id for r in request.records], source="calibration",
                cost=ReleaseCost(epsilon=release, delta=0.0, mechanism="laplace"), rule=budget_rule(policy),
            )
        async with paid or contextlib.nullcontext():
            try:
                fitted = calibrator.fit(data, release_epsilon=release, rng=make_rng(self.settings.noise_seed),
                                        min_answers=self.settings.calibration_min_answers)
            except TooFewAnswers as exc:
                raise TooFewAnswers(f"{exc} (FEDCD_CALIBRATION_MIN_ANSWERS = {self.settings.calibration_min_answers}; "
                                    f"failures: {failures})") from exc
            notes = list(students.notes)
            if students.truth_source == "proportion-correct":
                notes.append("truth: the paper's rule, per-concept proportion correct over each record's responses")
            if release is None and students.simulated and request.release_epsilon is None:
                notes.append("released without noise by default: the validation students are SIMULATED, nobody to protect")
            record = calibration_record(
                fitted, record_id=f"cal-{uuid.uuid4().hex[:12]}", qmatrix_id=q.id, entities=selected, noise=noise,
                truth_source=students.truth_source, n_students=len(data),
                version=self.calibrations.next_version(tenant, q.id), notes=notes, metrics=students.metrics,
            )
            self.calibrations.save(record, tenant=tenant, qmatrix_version=stored.version)
            if paid is not None:
                await paid.settle(f"calibration {record.id}")
        if paid is not None:
            count_charge(tenant, "calibration", release * len(paid.charges))  # type: ignore[operator]  # set with paid
        seconds = time.perf_counter() - start
        log.info("calibration %s (%s, %d students) fitted in %.1f s", record.id, record.method, len(data), seconds)
        return {"calibration_id": record.id, "metrics": {**record.metrics, "seconds": seconds}, "notes": record.notes}


def start_default_calibration(
    jobs: JobRunner, calibrations: CalibrationStore, settings: Settings, federation: Federation
) -> str | None:
    """First start: calibrate the example Q-matrix on SIMULATED validation students, once.

    Later starts reuse the stored calibration (or the job a restart resumed). The server
    answers meanwhile, uncalibrated (``calibration_id`` null) until the job finishes.
    """
    if calibrations.latest_for(SHARED_TENANT, EXAMPLE_QMATRIX_ID, 1) is not None or jobs.has_active("calibrate"):
        return None
    request = CalibrateRequest(
        qmatrix_id=EXAMPLE_QMATRIX_ID,
        dataset=DatasetRef(name="synthetic", part="validation", seed=0, max_students=settings.default_calibration_students),
        method=settings.default_calibration_method,
        release_epsilon="none",  # SIMULATED students: there is no one to protect, so no noise
    )
    job_id = jobs.submit("calibrate", request.model_dump(mode="json"), tenant=SHARED_TENANT)
    n_validation = round(settings.default_calibration_students * 0.2)
    log.info(
        "first start: fitting the default '%s' calibration for %s on %d SIMULATED validation students with %s "
        "(job %s; with the embedded models expect about %d s; diagnoses are uncalibrated until it finishes)",
        settings.default_calibration_method, EXAMPLE_QMATRIX_ID, n_validation, ", ".join(federation.names), job_id,
        n_validation * 8,
    )
    return job_id
