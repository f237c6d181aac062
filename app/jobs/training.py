"""The ``train`` job of an upload (``app.services.training`` checks the upload and submits it): split the students,
train the tenant's own local-fed model, publish it if the promotion gate accepts it, submit a calibration on the
validation part. The upload is deleted when the job ends, or when it is cancelled without running (:meth:`discard`);
a job released at shutdown keeps it for the worker that resumes the job."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import numpy as np

from app.domain_errors import NotFound
from app.jobs.context import JobContext
from app.schemas import CalibrateRequest
from app.services.calibration import CalibrationService
from app.settings import Settings
from app.storage import QMatrixStore
from qmatrix import StudentResponses
from qmatrix.datasets import Dataset
from qmatrix.responses import read_responses_csv

__all__ = ["TrainingJobHandler", "uploads_dir"]

log = logging.getLogger("fedcd.training")


def uploads_dir(settings: Settings) -> Path:
    """Where accepted uploads wait for their job (owner-only files)."""
    return settings.state_dir / "uploads"


class TrainingJobHandler:
    """Runs ``train`` jobs (register :meth:`run`, and :meth:`discard` for a job abandoned before it ran)."""

    def __init__(self, *, qmatrices: QMatrixStore, calibration: CalibrationService, settings: Settings) -> None:
        self.qmatrices, self.calibration, self.settings = qmatrices, calibration, settings

    @property
    def registry_dir(self) -> Path:
        """Where local-fed reads its models: the declared local-fed entity's folder, else the default registry."""
        declared = [s.model_path for s in self.settings.entity_specs if s.kind == "local_fed" and s.model_path]
        return Path(declared[0]) if declared else self.settings.registry_dir

    @property
    def uploads(self) -> Path:
        return uploads_dir(self.settings)

    def discard(self, request: dict[str, Any]) -> None:
        """A train job cancelled without running (queued, or its worker died while cancelling): delete its upload."""
        name = str(request.get("upload") or "")
        if name and Path(name).name == name:  # a bare file name, never a path out of the uploads folder
            (self.uploads / name).unlink(missing_ok=True)

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
            raise NotFound(("qmatrix_id",), [f"Q-matrix '{request['qmatrix_id']}' version "
                                             f"{request['qmatrix_version']} was deleted"])
        q = stored.qmatrix
        students = await asyncio.to_thread(read_responses_csv, path)
        # The calibration this job submits refuses more records, or longer ones, than a /v1/calibrate request may
        # hold: found only after training, that would fail a job whose model was trained and published.
        validation, training = _split(
            students, settings.train_calibration_fraction,
            min(settings.train_calibration_students, settings.max_calibration_records), seed=settings.train_seed,
            longest=settings.max_responses_per_student,
        )
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
            metrics["calibration_job_id"] = await self.calibration.submit(calibrate, tenant, capped=False)
            await asyncio.to_thread(job.step, rounds + 2, f"calibration job {metrics['calibration_job_id']} submitted "
                                    f"on {len(validation)} validation students")
        else:
            notes.append("no calibration: no validation students (FEDCD_TRAIN_CALIBRATION_STUDENTS=0)")
        log.info("train job %s: %s", job.job_id, published)
        return {"metrics": metrics, "notes": notes}


def _split(students: list[StudentResponses], fraction: float, most: int, *, seed: int, longest: int | None = None
           ) -> tuple[list[StudentResponses], list[StudentResponses]]:
    """(validation, training): a seeded draw of ``fraction`` of the students, at most ``most``, for the calibration.
    A student with more than ``longest`` responses is never drawn for it (trained on instead)."""
    order = [int(i) for i in np.random.default_rng(seed).permutation(len(students))]
    n = min(most, int(round(fraction * len(students))))
    drawn = [i for i in order if longest is None or len(students[i].responses) <= longest][:n]
    chosen = set(drawn)
    return [students[i] for i in drawn], [students[i] for i in order if i not in chosen]
