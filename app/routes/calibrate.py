"""Calibration jobs (``/v1/calibrate``) and the calibration records they produce (``/v1/calibrations``)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import APIRouter, status

from app.deps import CalibrationStoreDep, FederationDep, JobRunnerDep, QMatrixStoreDep, TenantDep
from app.errors import InputError
from app.schemas import CalibrateJob, CalibrateRequest, CalibrationList, CalibrationPublic, JobAccepted, JobProgress
from diagnosis import UnknownEntities
from evaluation.datasets import DATASET_NAMES

router = APIRouter(tags=["calibration"])


def _check(body: CalibrateRequest, qmatrices: QMatrixStoreDep, federation: FederationDep) -> None:
    """Refuse bad input now (422 naming the field), not minutes later inside the job."""
    if body.entities is not None:
        try:
            federation.pipeline.select(body.entities)
        except UnknownEntities as exc:
            raise InputError(("body", "entities"), [str(exc)]) from exc
    if body.records is not None:
        q = qmatrices.get(body.qmatrix_id or "")
        if q is None:
            raise InputError(("body", "qmatrix_id"), [f"unknown Q-matrix id '{body.qmatrix_id}'"])
        for n, record in enumerate(body.records):
            unknown = q.unknown_items(r.item_id for r in record.responses)
            if unknown:
                raise InputError(
                    ("body", "records", n, "responses"),
                    [f"unknown item ids for Q-matrix '{q.id}': {', '.join(unknown)}"],
                    extra={"unknown_item_ids": unknown},
                )
            bad = [c for c in (record.truth or {}) if c not in q.concepts]
            if bad:
                raise InputError(("body", "records", n, "truth"), [f"unknown concepts: {', '.join(bad)}"])
    elif body.dataset is not None and body.dataset.name not in DATASET_NAMES and not Path(body.dataset.name).is_dir():
        raise InputError(("body", "dataset", "name"), [f"unknown dataset '{body.dataset.name}' (use {', '.join(DATASET_NAMES)} or a folder)"])


@router.post("/v1/calibrate", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted)
async def create_calibration_job(
    body: CalibrateRequest, jobs: JobRunnerDep, qmatrices: QMatrixStoreDep, federation: FederationDep, tenant: TenantDep
) -> JobAccepted:
    """Start fitting the aggregation on a validation split; poll ``GET /v1/calibrate/{job_id}``.

    The fitted parameters are released with ``release_epsilon`` (charged to each validation student).
    """
    _check(body, qmatrices, federation)
    return JobAccepted(job_id=jobs.submit("calibrate", {**body.model_dump(mode="json"), "tenant": tenant}))


@router.get("/v1/calibrate/{job_id}", response_model=CalibrateJob, responses={404: {"description": "unknown job"}})
async def read_calibration_job(job_id: str, jobs: JobRunnerDep) -> CalibrateJob:
    row = jobs.get(job_id)
    if row is None or row.kind != "calibrate":
        raise InputError(("path", "job_id"), [f"unknown job id '{job_id}'"], status_code=404)
    return CalibrateJob(
        job_id=row.id,
        status=row.status,  # type: ignore[arg-type]
        progress=JobProgress(done=row.done, total=row.total, failed_entities=json.loads(row.failed_entities_json)),
        calibration_id=row.calibration_id,
        metrics=json.loads(row.metrics_json),
        notes=json.loads(row.notes_json),
        error=row.error,
        resumed=row.resumed,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@router.get("/v1/calibrations", response_model=CalibrationList)
async def read_calibrations(calibrations: CalibrationStoreDep, qmatrix_id: str | None = None) -> CalibrationList:
    data = [CalibrationPublic.model_validate(r.to_json()) for r in calibrations.list(qmatrix_id)]
    return CalibrationList(data=data, count=len(data))


@router.get("/v1/calibrations/{calibration_id}", response_model=CalibrationPublic, responses={404: {"description": "unknown id"}})
async def read_calibration(calibration_id: str, calibrations: CalibrationStoreDep) -> CalibrationPublic:
    record = calibrations.get(calibration_id)
    if record is None:
        raise InputError(("path", "calibration_id"), [f"unknown calibration id '{calibration_id}'"], status_code=404)
    return CalibrationPublic.model_validate(record.to_json())
