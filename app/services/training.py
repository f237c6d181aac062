"""Upload and train: a tenant's own response history becomes its own local-fed model and a calibration.

``POST /v1/qmatrices/{id}/train`` checks the upload before any job exists (a readable CSV, only items of the
Q-matrix, enough students: else 422 naming the problem), keeps it in ``<state_dir>/uploads`` (owner-only), and
submits a ``train`` job that, in this order:

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
the two). Nothing else of the upload is kept: the model holds parameters, not responses. The job's request records
the keyed hash of each student in the upload with their number of responses (``student_rows``), so a student's
export and erasure find the upload without reading every file of the tenant.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from app.errors import InputError
from app.pseudonyms import Pseudonyms
from app.schemas import CalibrateRequest
from app.services.calibration import CalibrationService
from app.services.job_context import JobContext
from app.services.jobs import JobRunner
from app.settings import Settings
from app.storage import QMatrixStore
from qmatrix import QMatrix, StudentResponses
from qmatrix.datasets import Dataset
from qmatrix.responses import read_responses_csv

__all__ = ["TrainingService"]

log = logging.getLogger("fedcd.training")
_LISTED = 20  # unknown item ids named in a 422; the rest are counted


class TrainingService:
    """Accepts uploads and runs ``train`` jobs (module docstring)."""

    def __init__(
        self, *, qmatrices: QMatrixStore, jobs: JobRunner, calibration: CalibrationService, settings: Settings,
        pseudonyms: Pseudonyms,
    ) -> None:
        self.qmatrices, self.jobs, self.calibration, self.settings = qmatrices, jobs, calibration, settings
        self.pseudonyms = pseudonyms
        jobs.register("train", self.run, on_abandoned=self.discard)

    @property
    def registry_dir(self) -> Path:
        """Where local-fed reads its models: the declared local-fed entity's folder, else the default registry."""
        declared = [s.model_path for s in self.settings.entity_specs if s.kind == "local_fed" and s.model_path]
        return Path(declared[0]) if declared else self.settings.registry_dir

    @property
    def uploads(self) -> Path:
        return self.settings.state_dir / "uploads"

    # -- accepting an upload --------------------------------------------------------------------
    def accept(self, qmatrix_id: str, data: bytes, tenant: str) -> str:
        """Check the upload and submit its job (blocking: run it in a worker thread); the job id."""
        stored = self.qmatrices.get(tenant, qmatrix_id)
        if stored is None:
            raise InputError(("path", "qmatrix_id"), [f"unknown Q-matrix '{qmatrix_id}'"], status_code=404)
        self.uploads.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.uploads / f"{uuid.uuid4().hex}.csv"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # student data: owner-only from the start
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            students = self._checked(path, stored.qmatrix)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        student_rows: dict[str, int] = {}
        for student in students:  # keyed hashes only: the raw ids stay in the caller's file, deleted with the job
            key = self.pseudonyms.key(tenant, student.student_id)
            student_rows[key] = student_rows.get(key, 0) + len(student.responses)
        return self.jobs.submit("train", {
            "qmatrix_id": qmatrix_id, "qmatrix_version": stored.version, "upload": path.name,
            "students": len(students), "responses": sum(len(s.responses) for s in students),
            "student_rows": student_rows,
        }, tenant=tenant)

    def discard(self, request: dict[str, Any]) -> None:
        """A train job cancelled without running (queued, or its worker died while cancelling): delete its upload."""
        name = str(request.get("upload") or "")
        if name and Path(name).name == name:  # a bare file name, never a path out of the uploads folder
            (self.uploads / name).unlink(missing_ok=True)

    def _checked(self, path: Path, q: QMatrix) -> list[StudentResponses]:
        loc = ("body", "responses")
        try:
            students = read_responses_csv(path)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(loc, [f"the responses CSV cannot be read: {exc}".replace(path.name, "responses")]) from exc
        unknown = q.unknown_items(r.item_id for s in students for r in s.responses)
        if unknown:
            more = f" … and {len(unknown) - _LISTED} more" if len(unknown) > _LISTED else ""
            raise InputError(loc, [f"items not in Q-matrix '{q.id}': {', '.join(unknown[:_LISTED])}{more}"])
        responses = sum(len(s.responses) for s in students)
        if len(students) > self.settings.train_max_students:
            raise InputError(loc, [f"{len(students)} students; an upload holds at most "
                                   f"{self.settings.train_max_students} (FEDCD_TRAIN_MAX_STUDENTS): split it"])
        if responses > self.settings.train_max_responses:
            raise InputError(loc, [f"{responses} responses; an upload holds at most "
                                   f"{self.settings.train_max_responses} (FEDCD_TRAIN_MAX_RESPONSES): split it"])
        if len(students) < self.settings.train_min_students:
            raise InputError(loc, [f"{len(students)} students; training needs at least "
                                   f"{self.settings.train_min_students} (FEDCD_TRAIN_MIN_STUDENTS)"])
        return students

    # -- the job --------------------------------------------------------------------------------
    async def run(self, request: dict[str, Any], job: JobContext) -> dict[str, Any]:
        path = self.uploads / str(request["upload"])
        try:
            outcome = await self._run(request, job, path)
        except asyncio.CancelledError:
            if job.cancel_requested:  # a user's cancel: nothing resumes this job
                path.unlink(missing_ok=True)
            raise  # released at shutdown: the upload stays for the worker that resumes the job
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        path.unlink(missing_ok=True)
        return outcome

    async def _run(self, request: dict[str, Any], job: JobContext, path: Path) -> dict[str, Any]:
        from federated import ModelRegistry, TrainingConfig, train_federated  # torch: only when a job trains

        settings, tenant = self.settings, job.tenant
        stored = self.qmatrices.get(tenant, request["qmatrix_id"], request["qmatrix_version"])
        if stored is None:
            raise RuntimeError(f"Q-matrix '{request['qmatrix_id']}' version {request['qmatrix_version']} was deleted")
        q = stored.qmatrix
        students = await asyncio.to_thread(read_responses_csv, path)
        validation, training = _split(students, settings.train_calibration_fraction, settings.train_calibration_students,
                                      seed=settings.train_seed)
        rounds = settings.train_rounds
        job.set_total(rounds + 2)
        await asyncio.to_thread(job.step, 0, f"training on {len(training)} students ({len(validation)} kept for the "
                                f"calibration), {rounds} rounds")

        def progress(record: Any) -> None:  # in the training thread, after each round
            job.check_cancelled()  # a cancelled job stops training here (and publishes nothing)
            job.step(int(record.round), f"round {record.round}/{rounds}: held-out AUC {record.auc:.4f}")

        registry = ModelRegistry(self.registry_dir, key_path=settings.model_signing_key)
        result = await asyncio.to_thread(
            train_federated, dataset=Dataset(name=f"upload {job.job_id}", qmatrix=q, students=training),
            registry=registry, config=TrainingConfig(clients=1, rounds=rounds, seed=settings.train_seed, threads=1),
            tenant=tenant, progress=progress,
        )
        metrics: dict[str, Any] = {
            "students": len(students), "train_students": len(training), "validation_students": len(validation),
            "rounds": len(result.history), "heldout_auc": result.heldout_metrics.get("auc"),
            "model_version": result.version, "gate_accepted": result.decision.accepted,
        }
        notes = [f"gate: {'; '.join(result.decision.reasons)}"] if result.decision.reasons else []
        published = (f"published {result.version} as this tenant's model of '{q.id}'" if result.version
                     else "not published: the promotion gate refused it")
        await asyncio.to_thread(job.step, rounds + 1, published)
        if validation:
            records = [{"student_id": s.student_id, "responses": [r.model_dump(exclude_none=True) for r in s.responses]}
                       for s in validation]
            calibrate = CalibrateRequest.model_validate({"qmatrix_id": q.id, "records": records})
            metrics["calibration_job_id"] = await self.calibration.submit(calibrate, tenant)
            await asyncio.to_thread(job.step, rounds + 2, f"calibration job {metrics['calibration_job_id']} submitted "
                                    f"on {len(validation)} validation students")
        else:
            notes.append("no calibration: no validation students (FEDCD_TRAIN_CALIBRATION_STUDENTS=0)")
        log.info("train job %s: %s", job.job_id, published)
        return {"metrics": metrics, "notes": notes}


def _split(students: list[StudentResponses], fraction: float, most: int, *, seed: int
           ) -> tuple[list[StudentResponses], list[StudentResponses]]:
    """(validation, training): a seeded draw of ``fraction`` of the students, at most ``most``, for the calibration."""
    order = np.random.default_rng(seed).permutation(len(students))
    n = min(most, int(round(fraction * len(students))))
    return [students[i] for i in order[:n]], [students[i] for i in order[n:]]
