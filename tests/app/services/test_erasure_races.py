"""Erasure never brings erased data back, and nothing of an upload outlives its job (issue 30, findings 2 and 3).

* Two erasures of students of one calibration job (a class), or an erasure racing the retention purge: each rewrites
  the job's stored request, and a stale copy written last would restore what the other erased. The race is made
  deterministic here: the first erasure has read the job when the second one (or the purge) runs to its end.
* A train job cancelled while queued, or while cancelling after its worker died, deletes its upload at once; the
  retention sweep deletes any upload whose job has ended, and purges a cancelled job's inputs like a finished one's.
* A job in ``cancelling`` still holds its students: erasure waits for it (409).
* An upload records its students' keyed hashes: export and erasure find it without reading the file.
* An upload is capped in students and rows.
Students are SIMULATED. Nothing asserts time; "40 days later" is the purge's ``now``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.db import JobItemRow, JobRow
from app.services import students as students_module
from app.services.students import StudentDataService
from qmatrix import qmatrix_from_json, simulate_dina
from qmatrix.responses import write_responses_csv
from tests.app.routes.test_student_data import BANK, RESPONSES, student_app
from tests.conftest import auth_headers

DAY = 86400.0
CLASS = ["ana-1", "ben-2", "cho-3"]


@pytest.fixture
def platform(tmp_path: Path, both_engines: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with student_app(tmp_path) as client:
        admin = auth_headers(client.app, tenant="platform")
        assert client.post("/v1/qmatrices", json=BANK, headers=admin).status_code == 201
        yield client, admin


def _finished_calibration(client: TestClient, *, status: str = "succeeded", age_days: float = 0.0) -> str:
    """A calibrate job whose stored request holds the class (keyed ids) and a result per student."""
    gateway = client.app.state.gateway
    keys = [gateway.pseudonyms.key("platform", s) for s in CLASS]
    request = {"qmatrix_id": "geometry", "records": [{"student_id": k, "responses": RESPONSES} for k in keys]}
    updated = time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime(time.time() - age_days * DAY))
    with gateway.database.sessions.begin() as session:
        session.add(JobRow(id="cal-class", tenant="platform", kind="calibrate", status=status,
                           request_json=json.dumps(request), updated_at=updated))
        session.flush()
        for i in range(len(keys)):
            session.add(JobItemRow(job_id="cal-class", idx=i, result_json=json.dumps({"ok": i})))
    return "cal-class"


def _stored(client: TestClient, job_id: str) -> tuple[list[Any], list[int]]:
    gateway = client.app.state.gateway
    with gateway.database.sessions() as session:
        request = json.loads(session.get(JobRow, job_id).request_json)  # type: ignore[union-attr]
        items = sorted(r.idx for r in session.query(JobItemRow).filter(JobItemRow.job_id == job_id))
    return request["records"], items


def _after_first_read(monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> None:
    """The next erasure reads where the student is stored, then ``meanwhile`` runs to its end, then it goes on."""
    original = StudentDataService._find
    calls: list[int] = []

    def find(self: StudentDataService, *args: Any) -> Any:
        found = original(self, *args)
        if not calls:
            calls.append(1)
            meanwhile()
        return found

    monkeypatch.setattr(StudentDataService, "_find", find)


def test_two_erasures_of_one_class_each_keep_the_others_erasure(platform, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client, admin = platform
    job_id = _finished_calibration(client)

    def second() -> None:
        r = client.delete(f"/v1/students/{CLASS[1]}", headers=admin)
        assert r.status_code == 200 and r.json()["removed"]["job_inputs"] == 1, r.text

    _after_first_read(monkeypatch, second)
    r = client.delete(f"/v1/students/{CLASS[0]}", headers=admin)
    assert r.status_code == 200 and r.json()["removed"]["job_inputs"] == 1, r.text

    records, items = _stored(client, job_id)
    assert records[0] is None and records[1] is None, records  # the second erasure was not undone
    assert records[2] is not None and items == [2]
    assert client.get(f"/v1/students/{CLASS[1]}/export", headers=admin).json()["jobs"] == []


def test_an_erasure_racing_the_retention_purge_restores_nothing(platform, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client, admin = platform
    job_id = _finished_calibration(client, age_days=31)
    purged: list[dict[str, int]] = []
    _after_first_read(monkeypatch, lambda: purged.append(client.app.state.gateway.purger.purge()))

    r = client.delete(f"/v1/students/{CLASS[0]}", headers=admin)
    assert r.status_code == 200, r.text
    assert purged[0]["job_inputs"] == 3
    records, items = _stored(client, job_id)
    assert records == [None, None, None] and items == []  # the others' records stay purged


def test_a_cancelling_job_still_holds_its_students(platform) -> None:  # type: ignore[no-untyped-def]
    client, admin = platform
    _finished_calibration(client, status="cancelling")
    r = client.delete(f"/v1/students/{CLASS[0]}", headers=admin)
    assert r.status_code == 409 and "cal-class" in r.text, r.text
    assert _stored(client, "cal-class")[0][0] is not None


def test_retention_purges_a_cancelled_jobs_inputs_and_uploads_whose_job_ended(platform) -> None:  # type: ignore[no-untyped-def]
    client, _ = platform
    gateway = client.app.state.gateway
    _finished_calibration(client, status="cancelled", age_days=31)
    uploads = gateway.settings.state_dir / "uploads"
    uploads.mkdir(exist_ok=True)
    left, live = uploads / "left.csv", uploads / "live.csv"
    for path, status in ((left, "failed"), (live, "queued")):
        path.write_text("student_id,item_id,correct\nx,g0,1\n")  # fresh: far from FEDCD_RETENTION_RESPONSES_DAYS
        with gateway.database.sessions.begin() as session:
            session.add(JobRow(id=f"train-{status}", tenant="platform", kind="train", status=status,
                               request_json=json.dumps({"qmatrix_id": "geometry", "upload": path.name})))
    removed = gateway.purger.purge()
    assert removed["job_inputs"] == 3 and removed["uploads"] == 1, removed
    assert _stored(client, "cal-class") == ([None, None, None], [])
    assert not left.exists() and live.exists()  # a job that has not ended keeps its upload


def _history(tmp_path: Path, n: int = 40) -> bytes:
    path = tmp_path / f"history-{n}.csv"
    write_responses_csv(path, simulate_dina(qmatrix_from_json(BANK), n_students=n, seed=2).students)  # SIMULATED
    return path.read_bytes()


@pytest.fixture
def paused(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Path]]:
    """The app with its job runner claiming nothing: an upload's train job stays queued."""
    with student_app(tmp_path) as client:
        admin = auth_headers(client.app, tenant="platform")
        assert client.post("/v1/qmatrices", json=BANK, headers=admin).status_code == 201
        client.app.state.gateway.jobs._claim_one = lambda *args, **kwargs: None
        yield client, admin, tmp_path / "state" / "uploads"


def _upload(client: TestClient, admin: dict[str, str], data: bytes) -> str:
    r = client.post("/v1/qmatrices/geometry/train", headers=admin, files={"responses": ("h.csv", data, "text/csv")})
    assert r.status_code == 202, r.text
    return r.json()["job_id"]


def test_a_train_job_cancelled_while_queued_deletes_its_upload(paused, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client, admin, uploads = paused
    job_id = _upload(client, admin, _history(tmp_path))
    assert len(list(uploads.iterdir())) == 1
    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=admin)
    assert r.status_code == 202 and r.json()["status"] == "cancelled", r.text
    assert list(uploads.iterdir()) == []


def test_a_train_job_whose_worker_died_while_cancelling_deletes_its_upload(paused, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client, admin, uploads = paused
    gateway = client.app.state.gateway
    job_id = _upload(client, admin, _history(tmp_path))
    with gateway.database.sessions.begin() as session:  # claimed by a worker that then died
        row = session.get(JobRow, job_id)
        row.status, row.claimed_by, row.heartbeat_at = "running", "dead", time.time() - 3600  # type: ignore[union-attr]
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=admin).json()["status"] == "cancelling"
    # A live worker's heartbeat finds the orphan: the cancel wakes this worker's own at once, and this call makes
    # sure one has run (it is idempotent), whichever came first.
    gateway.jobs._heartbeat_running()
    assert client.get(f"/v1/jobs/{job_id}", headers=admin).json()["status"] == "cancelled"
    assert list(uploads.iterdir()) == []


def test_an_upload_lists_its_students_keyed_and_export_reads_no_file(paused, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client, admin, uploads = paused
    data = _history(tmp_path)
    job_id = _upload(client, admin, data)
    student = data.decode().splitlines()[1].split(",")[0]
    rows = sum(1 for line in data.decode().splitlines()[1:] if line.split(",")[0] == student)

    def no_reading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("export read an upload file")

    monkeypatch.setattr(students_module, "read_responses_csv", no_reading)
    export = client.get(f"/v1/students/{student}/export", headers=admin)
    assert export.status_code == 200, export.text
    assert [(u["job_id"], u["rows"]) for u in export.json()["uploads"]] == [(job_id, rows)]
    assert client.get("/v1/students/nobody-here/export", headers=admin).json()["uploads"] == []
    # the job holds the upload: erasure waits; once cancelled (upload deleted), the student's entry goes too
    assert client.delete(f"/v1/students/{student}", headers=admin).status_code == 409
    client.post(f"/v1/jobs/{job_id}/cancel", headers=admin)
    assert client.delete(f"/v1/students/{student}", headers=admin).status_code == 200
    key = client.app.state.gateway.pseudonyms.key("platform", student)
    with client.app.state.gateway.database.sessions() as session:
        assert key not in session.get(JobRow, job_id).request_json  # type: ignore[union-attr]


@pytest.mark.parametrize("cap,value,needle", [("train_max_students", 35, "FEDCD_TRAIN_MAX_STUDENTS"),
                                              ("train_max_responses", 100, "FEDCD_TRAIN_MAX_RESPONSES")])
def test_an_upload_is_capped_in_students_and_rows(tmp_path: Path, cap: str, value: int, needle: str) -> None:
    with student_app(tmp_path, **{cap: value}) as client:
        admin = auth_headers(client.app, tenant="platform")
        assert client.post("/v1/qmatrices", json=BANK, headers=admin).status_code == 201
        r = client.post("/v1/qmatrices/geometry/train", headers=admin,
                        files={"responses": ("h.csv", _history(tmp_path), "text/csv")})
        assert r.status_code == 422 and needle in r.text, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "responses"]
        assert list((tmp_path / "state" / "uploads").iterdir()) == []
