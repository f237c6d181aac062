"""The ``calibrate`` job: run the diagnosis pipeline over a validation split, then fit a calibrator.

The validation students (``app.services.validation``) go through the same pipeline as a diagnosis, at the noise
level diagnoses use (mechanism, ε, sensitivity: the request's, else the tenant's defaults), so the calibration is
fitted on the kind of answers it will correct, and the record stores that level (``calibration.fitting``: the
evaluation's ``served`` row fits through the same functions). Entity answers are cached within the job (beneath the
privacy wrapper, so each reuse is privatized afresh). Each finished student is stored at once; a job cut off by a
restart resumes where it stopped. Entities with fewer than ``FEDCD_CALIBRATION_MIN_ANSWERS`` successful validation
answers are left out of the fit (``calibration.exclusion``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import replace
from typing import Any

from app.federation import Federation
from app.metrics import count_charge
from app.pseudonyms import cache_tag
from app.domain_errors import InvalidInput
from app.schemas import CalibrateRequest, PrivacyPolicy, PrivacyPolicyPublic
from app.services.forecasts import ForecastService
from app.jobs.context import JobContext
from app.jobs.failures import JobFailed
from app.services.usage import account_usage
from app.services.validation import ValidationCohort, ValidationLoader
from app.settings import Settings
from app.storage import CalibrationStore, PolicyStore, UsageStore, budget_rule
from calibration import (
    SERVING_SCALE,
    ItemCheck,
    TooFewAnswers,
    trained_scale,
    ValidationAnswer,
    answer_validation_student,
    calibration_record,
    make_calibrator,
    ability_truth,
    validation_set,
)
from calibration.held_out import keep_back
from diagnosis import DiagnosisPipeline, NoiseLevel
from privacy import AsyncLedger, LaplaceMechanism, ReleaseCost, StudentKey, make_rng
from providers.cache import tagged_as
from providers.item_response import ItemResponseFunction, items_to_forecast
from providers.wrappers import Cached

__all__ = ["CalibrationJobHandler", "check_unnoised_release", "validation_noise"]


def check_unnoised_release(request: CalibrateRequest, policy: PrivacyPolicyPublic) -> None:
    """Refuse (``InvalidInput`` naming the field) a calibration on real students (``records``) that asks for its
    validation answers (``epsilon``) or its released parameters (``release_epsilon``) without noise, unless the
    tenant's policy allows unnoised answers (``allow_unnoised``, already bounded by the server's setting): unnoised,
    such a release is neither protected nor charged to any student's budget. An omitted ``release_epsilon`` takes the
    operator's ``FEDCD_CALIBRATION_RELEASE_EPSILON`` (unset there: the operator's own choice of no noise).
    SIMULATED datasets protect nobody and are not checked."""
    if request.records is None or policy.allow_unnoised:
        return
    if request.epsilon == "none":
        raise InvalidInput(("epsilon",), [
            '"none" would answer real students\' responses unnoised, with unbounded privacy cost; the tenant\'s '
            "privacy policy refuses it (allow_unnoised)"])
    if request.release_epsilon == "none":
        raise InvalidInput(("release_epsilon",), [
            '"none" would release parameters fitted on real students without noise and without charging their '
            "budgets; the tenant's privacy policy refuses it (allow_unnoised): give an ε"])


def validation_noise(request: CalibrateRequest, policy: PrivacyPolicy) -> NoiseLevel:
    """The noise the validation answers are privatized at: the request's, else what the tenant's diagnoses use (so
    the calibration describes the answers diagnoses will aggregate)."""
    epsilon = None if request.epsilon == "none" else (
        float(request.epsilon) if request.epsilon is not None else policy.default_epsilon
    )
    return NoiseLevel(
        mechanism=request.mechanism or policy.default_mechanism, epsilon=epsilon,
        sensitivity=request.sensitivity or policy.sensitivity, delta=request.delta,
    )

log = logging.getLogger("fedcd.calibration")

KEPT_BACK_NOTE = ("about a fifth of each validation student's responses (none of a student with one) was kept back "
                  "from the entities and from the truth: the DP guard compares its candidates by their item forecasts "
                  "of those (calibration.held_out)")


class CalibrationJobHandler:
    """Runs ``calibrate`` jobs (register :meth:`run` with the job runner)."""

    def __init__(
        self,
        *,
        federation: Federation,
        validation: ValidationLoader,
        calibrations: CalibrationStore,
        policies: PolicyStore,
        settings: Settings,
        usage: UsageStore,
        ledger: AsyncLedger | None = None,
        forecasts: ForecastService | None = None,
    ) -> None:
        self.federation, self.validation, self.calibrations, self.policies = federation, validation, calibrations, policies
        self.settings, self.usage, self.ledger, self.forecasts = settings, usage, ledger, forecasts

    async def _serving_scale(self, cohort: ValidationCohort, tenant: str) -> ItemResponseFunction | None:
        """The item parameters the tenant's forecasts on the cohort's Q-matrix use, for every item a validation student
        answered, where a trained model gives them (``trained_scale``); None without one."""
        if self.forecasts is None:
            return None
        q = cohort.stored.qmatrix
        items = items_to_forecast(q, {r.item_id for s in cohort.students for r in s.responses})
        irf = await asyncio.to_thread(self.forecasts.item_response, items, q, q.id, tenant)
        return irf if trained_scale(irf) else None

    @staticmethod
    def _on_serving_scale(cohort: ValidationCohort, irf: ItemResponseFunction | None) -> ValidationCohort:
        """``cohort`` with every truth derived from responses replaced by the student's abilities read through the
        item parameters ``irf`` the tenant's forecasts use (``calibration.ability_truth``: the aggregate is then
        fitted on the scale an item forecast reads it on). Provided and simulated truths are kept as given, and so is
        every truth when no trained model serves the Q-matrix (``irf`` None)."""
        if irf is None or not any(cohort.derived):
            return cohort
        students = [
            replace(s, truth=ability_truth(irf, s.responses, list(s.truth))) if d else s
            for s, d in zip(cohort.students, cohort.derived, strict=True)
        ]
        derived = sum(cohort.derived)
        note = (f"truth: for the {derived} of {len(students)} validation students whose truth was derived from their "
                f"responses, their abilities read through {irf.model}'s item parameters (maximum a posteriori under "
                "the model's prior; the scale item forecasts read the aggregate on), not the proportion correct")
        source = SERVING_SCALE if derived == len(students) else "mixed"
        return replace(cohort, students=students, truth_source=source, notes=[*cohort.notes, note])

    @staticmethod
    def _kept_back(cohort: ValidationCohort, irf: ItemResponseFunction
                   ) -> tuple[ValidationCohort, list[list[ItemCheck]]]:
        """(the cohort as the entities and the truth see it, the checks of the responses kept back) for a DP release
        whose guard chooses what is served (``calibration.held_out``): about a fifth of each student's responses
        (none of a student with one) is kept back, and the guard compares its candidates' forecasts of them through
        ``irf``. Split before any truth is derived, so the truth reads only what the entities answer."""
        students, checks = [], []
        for s in cohort.students:
            seen, held = keep_back(s.student_id, s.responses, irf)
            students.append(replace(s, responses=seen))
            checks.append(held)
        return replace(cohort, students=students, notes=[*cohort.notes, KEPT_BACK_NOTE]), checks

    def _release_epsilon(self, request: CalibrateRequest, simulated: bool) -> float | None:
        """ε the fitted parameters are released with: the request's; omitted, none for SIMULATED students (there is
        nobody to protect, and noise would only blur a fit on few students), else the server default."""
        if request.release_epsilon == "none":
            return None
        if request.release_epsilon is not None:
            return float(request.release_epsilon)
        return None if simulated else self.settings.calibration_release_epsilon

    async def run(self, raw_request: dict[str, Any], job: JobContext) -> dict[str, Any]:
        start = time.perf_counter()
        tenant = job.tenant
        request = CalibrateRequest.model_validate(raw_request)
        cohort = await asyncio.to_thread(self.validation.load, request, tenant)
        job.set_total(len(cohort.students))
        policy = await asyncio.to_thread(self.policies.current, tenant)
        # Checked when submitted too; again here, as the policy may have changed while the job was queued.
        check_unnoised_release(request, policy)
        noise = validation_noise(request, policy)
        calibrator = make_calibrator(
            request.method or self.settings.default_calibration_method, **({"isotonic": True} if request.isotonic else {})
        )
        release = self._release_epsilon(request, cohort.simulated)
        guarded = release is not None and calibrator.scores_held_out  # a DP guard that scores kept-back responses
        # the item parameters only where a truth is derived or a guard scores forecasts (loading may read a model)
        irf = await self._serving_scale(cohort, tenant) if guarded or any(cohort.derived) else None
        checks: list[list[ItemCheck]] | None = None
        if irf is not None and guarded:
            cohort, checks = self._kept_back(cohort, irf)
        cohort = self._on_serving_scale(cohort, irf)
        selected = self.federation.pipeline.select(request.entities)
        # Cached beneath Privatized: repeated identical prompts are answered once per job.
        pipeline = DiagnosisPipeline(
            {n: Cached(e) for n, e in selected.items()}, seed=self.settings.noise_seed,
            prices=self.federation.pipeline.prices,
        )
        # Items stored in another form (by an earlier version, or before responses were kept back) are answered
        # again rather than misread: an answer made with the kept-back responses in view would score itself.
        finished = {i: v for i, v in job.finished_items().items()
                    if "answers" in v and v.get("kept_back", False) == (checks is not None)}
        failures: dict[str, int] = {}
        for item in finished.values():
            for name in item.get("failed", []):
                failures[name] = failures.get(name, 0) + 1
        gate = asyncio.Semaphore(self.settings.batch_concurrency)
        q = cohort.stored.qmatrix

        async def one(idx: int) -> None:
            student = cohort.students[idx]
            async with gate:
                # A tenant's own students (records: keyed already) tag the cached answers made from their responses.
                with tagged_as(cache_tag(tenant, student.student_id) if request.records is not None else None):
                    answer = await answer_validation_student(
                        pipeline, student, qmatrix=q, noise=noise, keep_clean=calibrator.fits_clean_answers,
                        cache_scope=tenant,
                    )
                await account_usage(self.usage, tenant, "calibration", answer.outcomes, job_id=job.job_id)
                for name in answer.failed:
                    failures[name] = failures.get(name, 0) + 1
                stored = {**answer.to_json(), **({"kept_back": True} if checks is not None else {})}
                job.record_item(idx, stored, failed_entities=failures)
                finished[idx] = stored

        await asyncio.gather(*(one(i) for i in range(len(cohort.students)) if i not in finished))
        try:
            data = validation_set(
                [ValidationAnswer.from_json(finished[i]) for i in sorted(finished)],
                keep_clean=calibrator.fits_clean_answers,
                checks=None if checks is None else [checks[i] for i in sorted(finished)],
            )
        except ValueError as exc:
            raise JobFailed(f"{exc} (failures: {failures})") from exc  # counts and entity names: kept
        paid = None
        if release is not None and request.records is not None and self.ledger is not None:
            # Every validation student pays the release ε before anything is released, or nobody does
            # (privacy.ledger.release: refunded unless the record is saved and released).
            paid = self.ledger.releasing(
                tenant=tenant, students=[StudentKey(r.student_id) for r in request.records], source="calibration",
                cost=ReleaseCost(epsilon=release, delta=0.0, mechanism=LaplaceMechanism.name), rule=budget_rule(policy),
            )
        async with paid or contextlib.nullcontext():
            try:
                fitted = calibrator.fit(data, release_epsilon=release, rng=make_rng(self.settings.noise_seed),
                                        min_answers=self.settings.calibration_min_answers)
            except TooFewAnswers as exc:
                raise TooFewAnswers(f"{exc} (FEDCD_CALIBRATION_MIN_ANSWERS = {self.settings.calibration_min_answers}; "
                                    f"failures: {failures})") from exc
            record = calibration_record(
                fitted, record_id=f"cal-{uuid.uuid4().hex[:12]}", qmatrix_id=q.id, entities=selected, noise=noise,
                truth_source=cohort.truth_source, n_students=len(data),
                version=self.calibrations.next_version(tenant, q.id), notes=self._notes(request, cohort, release),
                metrics=cohort.metrics,
            )
            self.calibrations.save(record, tenant=tenant, qmatrix_version=cohort.stored.version)
            if paid is not None:
                await paid.settle(f"calibration {record.id}")
        if paid is not None:
            count_charge(tenant, "calibration", release * len(paid.charges))  # type: ignore[operator]  # set with paid
        seconds = time.perf_counter() - start
        log.info("calibration %s (%s, %d students) fitted in %.1f s", record.id, record.method, len(data), seconds)
        return {"calibration_id": record.id, "metrics": {**record.metrics, "seconds": seconds}, "notes": record.notes}

    @staticmethod
    def _notes(request: CalibrateRequest, cohort: ValidationCohort, release: float | None) -> list[str]:
        """What the record says about its validation students beyond the fit's own notes."""
        notes = list(cohort.notes)
        if cohort.truth_source == "proportion-correct":  # only without a forecast service (see _on_serving_scale)
            notes.append("truth: the paper's rule, per-concept proportion correct over each record's responses")
        if release is None and cohort.simulated and request.release_epsilon is None:
            notes.append("released without noise by default: the validation students are SIMULATED, nobody to protect")
        return notes
