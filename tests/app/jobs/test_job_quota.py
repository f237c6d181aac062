"""What one tenant may hold in the job queue (app.jobs.quota): at most FEDCD_MAX_ACTIVE_JOBS active jobs and
FEDCD_TRAIN_MAX_STORED_BYTES of uploads waiting on disk (409 with Retry-After, naming the setting), and jobs are
claimed fairly across tenants, on SQLite and on PostgreSQL (FOR UPDATE SKIP LOCKED)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.db import Database
from app.jobs import JobRunner
from app.jobs.quota import UploadsFull
from qmatrix import qmatrix_from_json
from tests.app.conftest import make_client
from tests.app.jobs.test_upload_and_train import BANK, _csv
from tests.conftest import bearer

SYNTHETIC = {"qmatrix_id": "example-prealgebra", "method": "bias",
             "dataset": {"name": "synthetic", "part": "validation", "max_students": 20}}


@pytest.fixture
def held(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """A server whose jobs stay queued (never claimed), so the tenant's active jobs are what the test submitted."""
    with make_client(tmp_path, {}, local_fed=False, **getattr(request, "param", {})) as client:
        client.app.state.gateway.jobs._claim_one = lambda *args, **kwargs: None  # type: ignore[attr-defined]
        yield client


def _uploads(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "uploads"
    return sorted(folder.iterdir()) if folder.exists() else []


def _train(client: TestClient, upload: bytes, headers: dict[str, str] | None = None) -> Any:
    return client.post("/v1/qmatrices/geometry/train", headers=headers,
                       files={"responses": ("history.csv", upload, "text/csv")})


@pytest.mark.parametrize("held", [{"max_active_jobs": 2}], indirect=True)
def test_a_tenant_at_its_active_job_cap_is_refused_409_naming_it(held: TestClient, tmp_path: Path) -> None:
    client = held
    assert client.post("/v1/qmatrices", json=BANK).status_code == 201
    upload = _csv(qmatrix_from_json(BANK), 40, tmp_path)
    first = client.post("/v1/calibrate", json=SYNTHETIC).json()["job_id"]
    assert _train(client, upload).status_code == 202
    for refused in (client.post("/v1/calibrate", json=SYNTHETIC), _train(client, upload)):
        assert refused.status_code == 409, refused.text
        assert refused.headers["Retry-After"].isdigit()
        assert "FEDCD_MAX_ACTIVE_JOBS = 2" in refused.json()["detail"][0]["msg"]
    assert len(_uploads(tmp_path)) == 1  # the refused upload was never stored
    # Another tenant's queue is its own; a cancelled job frees the tenant's place.
    other = bearer(client, tenant="other", role="admin")
    assert client.post("/v1/calibrate", json=SYNTHETIC, headers=other).status_code == 202
    assert client.post(f"/v1/jobs/{first}/cancel").status_code in (200, 202)
    assert client.post("/v1/calibrate", json=SYNTHETIC).status_code == 202


def test_uploads_waiting_on_disk_are_capped_per_tenant(tmp_path: Path) -> None:
    upload = _csv(qmatrix_from_json(BANK), 40, tmp_path)
    cap = len(upload) * 3 // 2  # one upload fits, two do not
    with make_client(tmp_path, {}, local_fed=False, train_max_stored_bytes=cap) as client:
        client.app.state.gateway.jobs._claim_one = lambda *args, **kwargs: None  # type: ignore[attr-defined]
        other = bearer(client, tenant="other", role="admin")
        for headers in (None, other):
            assert client.post("/v1/qmatrices", json=BANK, headers=headers).status_code == 201
        assert _train(client, upload).status_code == 202
        refused = _train(client, upload)
        assert refused.status_code == 409 and refused.headers["Retry-After"].isdigit()
        assert refused.json()["detail"][0]["loc"] == ["body", "responses"]
        assert f"FEDCD_TRAIN_MAX_STORED_BYTES = {cap}" in refused.json()["detail"][0]["msg"]
        assert len(_uploads(tmp_path)) == 1
        assert _train(client, upload, other).status_code == 202  # another tenant's uploads are counted apart


def test_an_upload_being_checked_counts_against_the_caps(tmp_path: Path) -> None:
    """Two uploads of one tenant at once: the second is checked while the first is still being read (no job yet),
    and must see it. Before, each check counted only submitted jobs, so parallel uploads all passed the byte cap."""
    upload = _csv(qmatrix_from_json(BANK), 40, tmp_path)
    cap = len(upload) * 3 // 2  # one upload fits, two do not
    with make_client(tmp_path, {}, local_fed=False, train_max_stored_bytes=cap) as client:
        gateway = client.app.state.gateway  # type: ignore[attr-defined]
        gateway.jobs._claim_one = lambda *args, **kwargs: None
        assert client.post("/v1/qmatrices", json=BANK).status_code == 201
        service = gateway.training
        real_checked, inside, go_on = service._checked, threading.Event(), threading.Event()

        def slow_first(path: Path, q: Any) -> Any:
            if not inside.is_set():
                inside.set()
                go_on.wait(timeout=30)
            return real_checked(path, q)

        service._checked = slow_first
        results: list[Any] = []
        first = threading.Thread(target=lambda: results.append(service.accept("geometry", upload, "default")))
        first.start()
        try:
            assert inside.wait(timeout=30)
            with pytest.raises(UploadsFull):
                service.accept("geometry", upload, "default")
        finally:
            go_on.set()
            first.join(timeout=30)
        assert len(results) == 1 and isinstance(results[0], str)  # the first one's job id
        assert len(_uploads(tmp_path)) == 1
        assert service._in_flight == {}  # nothing left reserved


def _fair_claims(database: Database) -> list[str]:
    runner = JobRunner(database.sessions, worker_id="w1", control_sessions=database.control_sessions)
    runner.register("long", lambda request, context: None)  # type: ignore[arg-type,return-value]
    for n in range(4):
        runner.submit("long", {"n": n}, tenant="busy")
    runner.submit("long", {"n": 0}, tenant="quiet")
    claimed = []
    for _ in range(3):
        found = runner._claim_one()
        assert found is not None
        claimed.append(f"{found[3]}:{found[2]['n']}")
    return claimed


def test_jobs_are_claimed_fairly_across_tenants(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'jobs.db'}")
    # The busy tenant's oldest first; then the quiet tenant's, submitted after four of busy's, before busy's second.
    assert _fair_claims(database) == ["busy:0", "quiet:0", "busy:1"]
    database.close()


def test_fair_claims_on_postgresql(postgres_url: str) -> None:
    database = Database(postgres_url)
    assert _fair_claims(database) == ["busy:0", "quiet:0", "busy:1"]
    database.close()
