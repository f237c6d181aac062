"""Upload and train: a tenant's own response history becomes its own local-fed model and a calibration.

``POST /v1/qmatrices/{id}/train`` checks the upload before any job exists (a readable CSV, only items of the
Q-matrix, enough students: else ``InvalidInput`` naming the problem), keeps it in ``<state_dir>/uploads``
(owner-only), and submits a ``train`` job that, in this order:

1. splits the students (seeded): a validation part for the calibration (``train_calibration_fraction``, at most
   ``train_calibration_students``), the rest for training;
2. trains local-fed on the training part (``federated.train_federated`` with one institution — the tenant's own
   data, no simulated federation), holding out a fifth of it for the promotion gate;
3. publishes it as the tenant's own model of the Q-matrix (``federated.registry.model_key``) if the gate accepts
   it — served to that tenant alone from its next request;
4. submits a calibration job on the validation part (truth: the proportion-correct rule), named in the result.

The upload is deleted when the job ends (succeeded, failed or cancelled — also when it is cancelled while queued,
or while cancelling after its worker died: ``discard``); a job released at shutdown keeps it, so the worker that
resumes the job can read it. The retention sweep deletes any upload whose job has ended (a worker that died between
the two). The job itself is ``app.jobs.training``. Nothing else of the upload is kept: the model holds parameters,
not responses. The job's request records the keyed hash of each student in the upload with their number of responses (``student_rows``), so a student's
export and erasure find the upload without reading every file of the tenant.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from app.domain_errors import InvalidInput, NotFound
from app.jobs import JobRunner
from app.jobs.quota import QueueFull, UploadsFull
from app.jobs.training import uploads_dir
from app.pseudonyms import Pseudonyms
from app.services.calibration import CalibrationService
from app.settings import Settings
from app.storage import QMatrixStore
from qmatrix import QMatrix, StudentResponses
from qmatrix.responses import read_responses_csv

__all__ = ["TrainingService"]

_LISTED = 20  # unknown item ids named in a refusal; the rest are counted


class TrainingService:
    """Accepts uploads and submits their ``train`` jobs (module docstring)."""

    def __init__(
        self, *, qmatrices: QMatrixStore, jobs: JobRunner, calibration: CalibrationService, settings: Settings,
        pseudonyms: Pseudonyms,
    ) -> None:
        self.qmatrices, self.jobs, self.calibration, self.settings = qmatrices, jobs, calibration, settings
        self.pseudonyms = pseudonyms
        # Uploads of each tenant accepted in this process and not yet submitted (their sizes): counted against the
        # caps with the jobs, so parallel uploads cannot all pass a check that sees none of the others.
        self._in_flight: dict[str, list[int]] = {}
        self._in_flight_guard = threading.Lock()

    @property
    def uploads(self) -> Path:
        return uploads_dir(self.settings)

    # -- accepting an upload --------------------------------------------------------------------
    def accept(self, qmatrix_id: str, data: bytes, tenant: str) -> str:
        """Check the upload and submit its job (blocking: run it in a worker thread); the job id."""
        stored = self.qmatrices.get(tenant, qmatrix_id)
        if stored is None:
            raise NotFound(("qmatrix_id",), [f"unknown Q-matrix '{qmatrix_id}'"])
        with self._reserved(tenant, len(data)):  # checked before the upload is written: a refusal stores nothing
            return self._stored_and_submitted(qmatrix_id, stored.version, stored.qmatrix, data, tenant)

    def _stored_and_submitted(self, qmatrix_id: str, version: int, qmatrix: QMatrix, data: bytes, tenant: str) -> str:
        self.uploads.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.uploads / f"{uuid.uuid4().hex}.csv"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # student data: owner-only from the start
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            students = self._checked(path, qmatrix)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        student_rows: dict[str, int] = {}
        for student in students:  # keyed hashes only: the raw ids stay in the caller's file, deleted with the job
            key = self.pseudonyms.key(tenant, student.student_id)
            student_rows[key] = student_rows.get(key, 0) + len(student.responses)
        try:  # the cap again, counted with the job's insert (another request of the tenant may have raced this one)
            return self.jobs.submit("train", {
                "qmatrix_id": qmatrix_id, "qmatrix_version": version, "upload": path.name,
                "students": len(students), "responses": sum(len(s.responses) for s in students),
                "student_rows": student_rows,
            }, tenant=tenant, max_active=self.settings.max_active_jobs)
        except BaseException:
            path.unlink(missing_ok=True)  # no job holds it: nothing else would delete it before the retention sweep
            raise

    @contextlib.contextmanager
    def _reserved(self, tenant: str, size: int) -> Iterator[None]:
        """The upload counted against the tenant's caps (:meth:`_check_quota`) from the check until its job is
        submitted (then the job counts it) or it is refused: checked and reserved under one lock in this process.
        Other workers may pass a cap by the few uploads that race."""
        with self._in_flight_guard:
            self._check_quota(tenant, size, self._in_flight.get(tenant, []))
            self._in_flight.setdefault(tenant, []).append(size)
        try:
            yield
        finally:
            with self._in_flight_guard:
                sizes = self._in_flight[tenant]
                sizes.remove(size)
                if not sizes:
                    del self._in_flight[tenant]

    def _check_quota(self, tenant: str, size: int, in_flight: list[int]) -> None:
        """Refuse (409, ``Retry-After``) an upload while the tenant has ``FEDCD_MAX_ACTIVE_JOBS`` active jobs, or
        when its uploads waiting on disk for their jobs would pass ``FEDCD_TRAIN_MAX_STORED_BYTES`` with it. Uploads
        still being checked (``in_flight``, their sizes) count as jobs and bytes already."""
        cap = self.settings.max_active_jobs
        active = self.jobs.count_active(tenant) + len(in_flight)
        if active >= cap:
            raise QueueFull(tenant, active, cap)
        stored = sum(in_flight)
        for request in self.jobs.active_requests(tenant, "train"):
            upload = self.uploads / str(request.get("upload", ""))
            if request.get("upload") and upload.is_file():
                stored += upload.stat().st_size
        if stored + size > self.settings.train_max_stored_bytes:
            raise UploadsFull(tenant, stored, size, self.settings.train_max_stored_bytes)

    def _checked(self, path: Path, q: QMatrix) -> list[StudentResponses]:
        field = ("responses",)
        try:
            students = read_responses_csv(path)
        except (ValueError, UnicodeDecodeError) as exc:
            message = f"the responses CSV cannot be read: {exc}".replace(path.name, "responses")
            raise InvalidInput(field, [message]) from exc
        unknown = q.unknown_items(r.item_id for s in students for r in s.responses)
        if unknown:
            more = f" … and {len(unknown) - _LISTED} more" if len(unknown) > _LISTED else ""
            raise InvalidInput(field, [f"items not in Q-matrix '{q.id}': {', '.join(unknown[:_LISTED])}{more}"])
        responses = sum(len(s.responses) for s in students)
        if len(students) > self.settings.train_max_students:
            raise InvalidInput(field, [f"{len(students)} students; an upload holds at most "
                                   f"{self.settings.train_max_students} (FEDCD_TRAIN_MAX_STUDENTS): split it"])
        if responses > self.settings.train_max_responses:
            raise InvalidInput(field, [f"{responses} responses; an upload holds at most "
                                   f"{self.settings.train_max_responses} (FEDCD_TRAIN_MAX_RESPONSES): split it"])
        if len(students) < self.settings.train_min_students:
            raise InvalidInput(field, [f"{len(students)} students; training needs at least "
                                   f"{self.settings.train_min_students} (FEDCD_TRAIN_MIN_STUDENTS)"])
        return students
