"""Cancelling a job (issue 24: the console's jobs page cancels): a queued job is cancelled at once; a running one
is cancelling until the worker running it stops it, then cancelled — the handler's task is cancelled, threads stop
at their next check, a training upload is deleted and no model is published; webhooks hear "cancelled"; a finished
job is a 409; another tenant's job is a 404. Work is counted, never elapsed time; waits are bounded polls."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from app.db import Database, JobEventRow, JobRow
from app.jobs import JobCancelled, JobContext, JobRunner, JobTiming
from qmatrix import qmatrix_from_json, simulate_dina
from qmatrix.responses import write_responses_csv
from tests.app.jobs.test_upload_and_train import BANK
from tests.conftest import auth_headers


def _database(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'jobs.db'}")


def _status(database: Database, job_id: str) -> tuple[str, list[str]]:
    with database.sessions() as session:
        row = session.get(JobRow, job_id)
        events = session.query(JobEventRow).filter(JobEventRow.job_id == job_id).order_by(JobEventRow.seq).all()
        assert row is not None
        return row.status, [e.status for e in events]


async def _until(predicate: Any, polls: int = 4000) -> None:
    for _ in range(polls):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def test_a_queued_job_is_cancelled_at_once_and_a_running_one_when_its_worker_stops_it(tmp_path: Path) -> None:
    # Prepare: one job runs (its handler waits forever, as a long calibration would), one waits in the queue
    database = _database(tmp_path)
    finished: list[dict[str, Any]] = []
    runner = JobRunner(database.sessions, worker_id="w1", concurrency=1, timing=JobTiming(poll_s=0.01, heartbeat_s=3600.0),
                       control_sessions=database.control_sessions, on_finish=finished.append)
    started, stopped = asyncio.Event(), []

    async def handler(request: dict[str, Any], context: JobContext) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.append(context.cancel_requested)
            raise
        return {}

    runner.register("long", handler)
    running = runner.submit("long", {}, tenant="t")
    queued = runner.submit("long", {}, tenant="t")
    runner.start()
    await asyncio.wait_for(started.wait(), timeout=60)

    # Execute / Assert: the queued one at once, without running
    assert await runner.cancel(queued, tenant="t", by="key1") == ("cancelled", True)
    assert _status(database, queued) == ("cancelled", ["queued", "cancelled"])
    # ... another tenant's job is not found; a finished job keeps its status
    assert await runner.cancel(running, tenant="other") == (None, False)
    assert await runner.cancel(queued, tenant="t") == ("cancelled", False)
    # ... the running one: cancelling, then stopped by its worker (woken at once, not at the next heartbeat)
    assert await runner.cancel(running, tenant="t") == ("cancelling", True)
    await _until(lambda: _status(database, running)[0] == "cancelled" and len(finished) == 2)  # stored, then told
    assert stopped == [True]
    assert _status(database, running)[1] == ["queued", "running", "cancelling", "cancelled"]
    assert [(f["job_id"], f["status"]) for f in finished] == [(queued, "cancelled"), (running, "cancelled")]
    await runner.aclose()


async def test_a_cancelling_job_whose_worker_died_is_cancelled_by_another_worker(tmp_path: Path) -> None:
    database = _database(tmp_path)
    dead = JobRunner(database.sessions, worker_id="dead", control_sessions=database.control_sessions)
    job_id = dead.submit("long", {}, tenant="t")
    with database.sessions.begin() as session:  # claimed by a worker that then died
        row = session.get(JobRow, job_id)
        row.status, row.claimed_by, row.heartbeat_at = "running", "dead", time.time() - 3600  # type: ignore[union-attr]
    assert await dead.cancel(job_id, tenant="t") == ("cancelling", True)
    alive = JobRunner(database.sessions, worker_id="alive", live_workers=lambda: {"alive"},
                      control_sessions=database.control_sessions)
    assert alive._heartbeat_running() == []
    assert _status(database, job_id) == ("cancelled", ["queued", "cancelling", "cancelled"])


def test_a_thread_checks_for_its_cancel() -> None:
    context = JobContext(None, "j", "t")  # type: ignore[arg-type]
    context.check_cancelled()
    context.cancel_requested = True
    with pytest.raises(JobCancelled):
        context.check_cancelled()


@pytest.fixture
def gateway(tmp_path: Path):  # type: ignore[no-untyped-def]
    entities = [{"name": "local-fed", "kind": "local_fed", "model": "federated-cdm",
                 "model_path": str(tmp_path / "registry")}]
    settings = Settings(state_dir=tmp_path / "state", entities=entities, preload_models=False,  # type: ignore[arg-type]
                        default_calibration=False, train_default_model=False, privacy_cap_epsilon=1e6,
                        train_rounds=200, train_min_students=30, calibration_release_epsilon=None)
    app = create_app(settings)
    with TestClient(app) as client:
        yield client, auth_headers(app, tenant="platform"), auth_headers(app, tenant="other"), tmp_path


def test_cancelling_a_training_upload_stops_it_deletes_the_upload_and_publishes_nothing(gateway) -> None:  # type: ignore[no-untyped-def]
    client, admin, other, tmp_path = gateway
    assert client.post("/v1/qmatrices", json=BANK, headers=admin).status_code == 201
    history = tmp_path / "history.csv"
    write_responses_csv(history, simulate_dina(qmatrix_from_json(BANK), n_students=60, seed=2).students)  # SIMULATED
    job_id = client.post("/v1/qmatrices/geometry/train", headers=admin,
                         files={"responses": ("h.csv", history.read_bytes(), "text/csv")}).json()["job_id"]
    for _ in range(6000):  # bounded polls: until training has run a round (200 are asked for)
        job = client.get(f"/v1/jobs/{job_id}", headers=admin).json()
        if any(e["message"].startswith("round ") for e in job["history"]):
            break
        time.sleep(0.02)
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=other).status_code == 404
    assert client.post(f"/v1/jobs/{job_id}/cancel",
                       headers=auth_headers(client.app, tenant="platform", role="client")).status_code == 403

    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=admin)
    assert r.status_code == 202 and r.json()["status"] in ("cancelling", "cancelled"), r.text
    for _ in range(6000):
        job = client.get(f"/v1/jobs/{job_id}", headers=admin).json()
        if job["status"] == "cancelled":
            break
        time.sleep(0.02)
    assert job["status"] == "cancelled", job
    assert not any("published" in e["message"] for e in job["history"])
    assert list((tmp_path / "state" / "uploads").iterdir()) == []
    assert not list((tmp_path / "registry").rglob("*.pt"))  # nothing published for the tenant
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=admin).status_code == 409
    listed = client.get("/v1/jobs", headers=admin, params={"state": "cancelled"}).json()
    assert [j["job_id"] for j in listed["data"]] == [job_id]
