"""``/v1/calibrate`` and ``/v1/calibrations``: calibration jobs submitted (their input checked now, not minutes
later in the job), followed, and the records they produce read back. The job itself runs in
``app.jobs.calibration``; its validation students come from ``app.services.validation``.

The ``synthetic`` dataset simulates SIMULATED DINA students on the request's own Q-matrix (the example when it
names none), with their simulated mastery as the truth, so any Q-matrix can be calibrated before real data
exists; the job's notes and metrics and the record say the students were SIMULATED.
"""

from __future__ import annotations

import asyncio
import logging

from app.db import SHARED_TENANT
from app.domain_errors import InvalidInput, NotFound
from app.federation import Federation
from app.limits import check_responses
from app.pagination import Page, page_of
from app.pseudonyms import Pseudonyms
from app.services.validation import SIMULATED_TRUTH
from app.schemas import CalibrateJob, CalibrateRequest, CalibrationList, CalibrationPublic, DatasetRef
from app.jobs import JobQueries, JobRunner
from app.jobs.calibration import check_unnoised_release, validation_noise
from app.settings import Settings
from app.storage import CalibrationStore, PolicyStore, QMatrixStore, StoredCalibration, UsageStore
from diagnosis import UnknownEntities, calibration_mismatch
from qmatrix import EXAMPLE_QMATRIX_ID

__all__ = ["CalibrationService", "start_default_calibration"]

log = logging.getLogger("fedcd.calibration")


def _public(stored: StoredCalibration) -> CalibrationPublic:
    return CalibrationPublic.model_validate(
        {**stored.record.to_json(), "qmatrix_version": stored.qmatrix_version, "shared": stored.shared}
    )


class CalibrationService:
    def __init__(
        self,
        *,
        federation: Federation,
        qmatrices: QMatrixStore,
        calibrations: CalibrationStore,
        jobs: JobRunner,
        job_queries: JobQueries,
        settings: Settings,
        usage: UsageStore,
        pseudonyms: Pseudonyms,
    ) -> None:
        self.federation, self.qmatrices, self.calibrations, self.settings = federation, qmatrices, calibrations, settings
        self.jobs, self.job_queries, self.usage, self.pseudonyms = jobs, job_queries, usage, pseudonyms
        # The tenant's policy decides whether real students may be answered or released unnoised: a store over the
        # same database (it holds no state beyond the sessions and the settings' default).
        self.policies = PolicyStore(calibrations.sessions, settings)

    def check(self, body: CalibrateRequest, tenant: str) -> None:
        """Refuse bad input now (``InvalidInput`` naming the field, ``NotFound`` for an unknown Q-matrix), not minutes
        later in the job."""
        method = body.method or self.settings.default_calibration_method
        if body.isotonic and method != "stacking":
            raise InvalidInput(("isotonic",), [f"isotonic maps apply to method 'stacking' only, not '{method}'"])
        if body.entities is not None:
            try:
                self.federation.pipeline.select(body.entities)
            except UnknownEntities as exc:
                raise InvalidInput(("entities",), [str(exc)]) from exc
        if body.records is None:
            simulated_on = body.qmatrix_id if body.dataset is not None and body.dataset.name == "synthetic" else None
            if simulated_on is not None and self.qmatrices.get(tenant, simulated_on) is None:  # it must exist
                raise NotFound(("qmatrix_id",), [f"unknown Q-matrix id '{simulated_on}'"])
            return
        check_unnoised_release(body, self.policies.current(tenant))
        if len(body.records) > self.settings.max_calibration_records:
            raise InvalidInput(("records",), [f"at most {self.settings.max_calibration_records} records"])
        first: dict[str, int] = {}  # student id -> the record that names it first
        for n, record in enumerate(body.records):
            # The release charges each student once and sets its noise for one record per student: a student in k
            # records would weigh k times what the noise hides, for one charge (cohort reports refuse repeats too).
            seen = first.setdefault(record.student_id, n)
            if seen != n:
                raise InvalidInput(("records", n, "student_id"), [
                    f"record {n} names the student of record {seen} again: each student may appear once"])
        stored = self.qmatrices.get(tenant, body.qmatrix_id or "")
        if stored is None:
            raise NotFound(("qmatrix_id",), [f"unknown Q-matrix id '{body.qmatrix_id}'"])
        q = stored.qmatrix
        for n, record in enumerate(body.records):
            check_responses(q, record.responses, self.settings, ("records", n))
            bad = [c for c in (record.truth or {}) if c not in q.concepts]
            if bad:
                raise InvalidInput(("records", n, "truth"), [f"unknown concepts: {', '.join(bad)}"])

    async def submit(self, body: CalibrateRequest, tenant: str, *, capped: bool = True) -> str:
        """Check the request and queue its job; ``capped``: refused while the tenant has ``FEDCD_MAX_ACTIVE_JOBS``
        active (not for the calibration a training job submits as its last step: it takes that job's place)."""
        await asyncio.to_thread(self.check, body, tenant)
        request = body.model_dump(mode="json")
        for record in request["records"] or []:
            # The job's input is stored: it keeps the keyed hash, never the id (app.pseudonyms). The job charges and
            # tags cache entries under it as it is; nothing it returns names a student.
            record["student_id"] = self.pseudonyms.key(tenant, record["student_id"])
        return self.jobs.submit("calibrate", request, tenant=tenant,
                                max_active=self.settings.max_active_jobs if capped else None)

    async def job(self, job_id: str, tenant: str) -> CalibrateJob:
        """A calibration job of the tenant, with the entity usage of its finished students so far (``NotFound``
        otherwise)."""
        public = await self.job_queries.get(job_id, tenant, kind="calibrate")
        total = await asyncio.to_thread(self.usage.job_total, tenant, job_id)
        return CalibrateJob(**{name: value for name, value in public if name != "kind"}, usage=total)

    async def records(self, tenant: str, qmatrix_id: str | None, page: Page) -> CalibrationList:
        """The tenant's calibration records and the shared ones, by Q-matrix id and version, a page of them."""
        stored = await asyncio.to_thread(self.calibrations.list, tenant, qmatrix_id)
        chunk, last = page_of(stored, page, key=lambda s: (s.record.qmatrix_id, s.record.version, s.record.id))
        return CalibrationList(**page.envelope([_public(s) for s in chunk], last))

    async def record(self, tenant: str, calibration_id: str) -> CalibrationPublic:
        stored = await asyncio.to_thread(self.calibrations.get, tenant, calibration_id)
        if stored is None:
            raise NotFound(("calibration_id",), [f"unknown calibration id '{calibration_id}'"])
        return _public(stored)


def start_default_calibration(
    jobs: JobRunner, calibrations: CalibrationStore, policies: PolicyStore, settings: Settings, federation: Federation
) -> str | None:
    """First start: calibrate the example Q-matrix on SIMULATED validation students, once.

    Later starts reuse the stored calibration (or the job a restart resumed) while it was fitted at the noise the
    shared tenant's diagnoses use now. An upgrade that changed the default noise (e.g. the default mechanism) would
    otherwise leave every diagnosis flagged ``calibration_mismatch`` until someone recalibrates by hand, so a stored
    calibration fitted at another noise level is refitted once. The comparison is with the shared tenant's policy,
    not the settings: a customised shared policy is what its diagnoses use. The server answers meanwhile with the
    stored calibration (flagged), or uncalibrated (``calibration_id`` null) on a first start, until the job finishes.
    """
    if jobs.has_active("calibrate"):
        return None
    request = CalibrateRequest(
        qmatrix_id=EXAMPLE_QMATRIX_ID,
        dataset=DatasetRef(name="synthetic", part="validation", seed=0, max_students=settings.default_calibration_students),
        method=settings.default_calibration_method,
        release_epsilon="none",  # SIMULATED students: there is no one to protect, so no noise
    )
    stored = calibrations.latest_for(SHARED_TENANT, EXAMPLE_QMATRIX_ID, 1)
    if stored is not None and stored.record.truth_source != SIMULATED_TRUTH:
        return None  # an operator's own calibration on real students, at the noise they chose: never replaced
    if stored is not None:
        differ = calibration_mismatch(stored.record.noise, validation_noise(request, policies.current(SHARED_TENANT)))
        if differ is None:
            return None
        why = "; ".join(f"{name} {v['calibrated']} -> {v['served']}" for name, v in differ.items())
        log.warning("the stored default calibration %s of %s was fitted at another noise level than diagnoses use "
                    "now (%s): refitting it", stored.record.id, EXAMPLE_QMATRIX_ID, why)
    job_id = jobs.submit("calibrate", request.model_dump(mode="json"), tenant=SHARED_TENANT)
    n_validation = round(settings.default_calibration_students * 0.2)
    log.info(
        "%s: fitting the default '%s' calibration for %s on %d SIMULATED validation students with %s "
        "(job %s; with the embedded models expect about %d s; diagnoses are %s until it finishes)",
        "first start" if stored is None else "start", settings.default_calibration_method, EXAMPLE_QMATRIX_ID,
        n_validation, ", ".join(federation.names), job_id, n_validation * 8,
        "uncalibrated" if stored is None else f"flagged calibration_mismatch on {stored.record.id}",
    )
    return job_id
