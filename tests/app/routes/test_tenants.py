"""Tenant isolation of every resource, with both roles: another tenant's resource is 404, never 403."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import bearer, make_client
from tests.factories import FakeEntity
from tests.app.waiting import finished_job

# Every test here runs on both engines (SQLite and PostgreSQL).
pytestmark = pytest.mark.usefixtures("both_engines")

QA = {"id": "algebra", "concepts": ["A", "B"], "items": [
    {"id": "i1", "text": "x+1=2", "concepts": ["A"]}, {"id": "i2", "text": "2x=4", "concepts": ["B"]},
]}
RESPONSES = [{"item_id": "i1", "correct": True}, {"item_id": "i2", "correct": False}]


@pytest.fixture
def two(tmp_path: Path) -> tuple[TestClient, dict[str, dict[str, str]]]:
    entities = {"e": FakeEntity("e", 0.4)}
    with make_client(tmp_path, entities, privacy_cap_epsilon=50.0) as client:
        keys = {
            "a_admin": bearer(client, tenant="school-a", role="admin"),
            "a_client": bearer(client, tenant="school-a", role="client"),
            "b_admin": bearer(client, tenant="school-b", role="admin"),
            "b_client": bearer(client, tenant="school-b", role="client"),
        }
        assert client.post("/v1/qmatrices", json=QA, headers=keys["a_admin"]).status_code == 201
        yield client, keys


def _records(n: int) -> list[dict]:
    return [{"student_id": f"v{k}", "responses": RESPONSES, "truth": {"A": 0.9, "B": 0.1}} for k in range(n)]


def test_qmatrices_are_per_tenant(two: tuple[TestClient, dict]) -> None:
    client, keys = two
    for key in ("a_admin", "a_client"):
        assert client.get("/v1/qmatrices/algebra", headers=keys[key]).status_code == 200
    for key in ("b_admin", "b_client"):
        assert client.get("/v1/qmatrices/algebra", headers=keys[key]).status_code == 404
        assert "algebra" not in client.get("/v1/qmatrices", headers=keys[key]).json()["data"]
        r = client.post("/v1/diagnose", json={"student_id": "s", "qmatrix_id": "algebra", "responses": RESPONSES},
                        headers=keys[key])
        assert r.status_code == 404
    # B may use the same id for its own, different Q-matrix; neither replaces the other.
    other = {**QA, "concepts": ["Z"], "items": [{"id": "i1", "concepts": ["Z"]}]}
    assert client.post("/v1/qmatrices", json=other, headers=keys["b_admin"]).status_code == 201
    assert client.get("/v1/qmatrices/algebra", headers=keys["a_client"]).json()["concepts"] == ["A", "B"]
    assert client.get("/v1/qmatrices/algebra", headers=keys["b_client"]).json()["concepts"] == ["Z"]
    # B can neither replace nor delete A's.
    assert client.put("/v1/qmatrices/zzz", json={**QA, "id": "zzz"}, headers=keys["b_admin"]).status_code == 404
    assert client.delete("/v1/qmatrices/algebra", headers=keys["b_admin"]).status_code == 204  # deletes B's own
    assert client.get("/v1/qmatrices/algebra", headers=keys["a_client"]).status_code == 200


def test_an_existing_id_is_409_and_put_adds_a_version(two: tuple[TestClient, dict]) -> None:
    client, keys = two
    r = client.post("/v1/qmatrices", json=QA, headers=keys["a_admin"])
    assert r.status_code == 409 and "PUT" in r.text
    assert client.post("/v1/qmatrices", json={**QA, "id": "example-prealgebra"}, headers=keys["a_admin"]).status_code == 409
    changed = {**QA, "items": [{"id": "i1", "concepts": ["A", "B"]}, {"id": "i2", "concepts": ["B"]}]}
    r = client.put("/v1/qmatrices/algebra", json=changed, headers=keys["a_admin"])
    assert r.status_code == 200 and r.json()["version"] == 2
    assert client.get("/v1/qmatrices/algebra?version=1", headers=keys["a_client"]).json()["items"][0]["concepts"] == ["A"]
    assert client.put("/v1/qmatrices/algebra", json={**changed, "id": "other"}, headers=keys["a_admin"]).status_code == 422
    assert client.put("/v1/qmatrices/example-prealgebra", json=changed, headers=keys["a_admin"]).status_code == 409


def test_calibrations_apply_to_their_tenant_and_qmatrix_version_only(two: tuple[TestClient, dict]) -> None:
    client, keys = two
    body = {"qmatrix_id": "algebra", "records": _records(12), "epsilon": "none", "method": "bias"}
    job_id = client.post("/v1/calibrate", json=body, headers=keys["a_admin"]).json()["job_id"]
    job = finished_job(client, job_id, headers=keys["a_admin"], path="/v1/calibrate/{job_id}")
    assert job["status"] == "succeeded", job
    cal = job["calibration_id"]
    # The job and the record are A's: 404 for B, in both roles.
    assert client.get(f"/v1/calibrate/{job_id}", headers=keys["b_admin"]).status_code == 404
    for key in ("b_admin", "b_client"):
        assert client.get(f"/v1/calibrations/{cal}", headers=keys[key]).status_code == 404
        assert cal not in {c["id"] for c in client.get("/v1/calibrations", headers=keys[key]).json()["data"]}
    record = client.get(f"/v1/calibrations/{cal}", headers=keys["a_client"]).json()
    assert record["qmatrix_version"] == 1
    # "Newest calibration" applies to A's diagnoses, never to B's (B has its own 'algebra').
    diag = {"student_id": "s", "qmatrix_id": "algebra", "responses": RESPONSES, "epsilon": 1.0, "aggregation": "mean"}
    assert client.post("/v1/diagnose", json=diag, headers=keys["a_client"]).json()["calibration_id"] == cal
    assert client.post("/v1/qmatrices", json=QA, headers=keys["b_admin"]).status_code == 201
    assert client.post("/v1/diagnose", json=diag, headers=keys["b_client"]).json()["calibration_id"] is None
    r = client.post("/v1/diagnose", json={**diag, "calibration_id": cal}, headers=keys["b_client"])
    assert r.status_code == 404
    # A new version of the rows: the old calibration no longer applies, and naming it is refused.
    client.put("/v1/qmatrices/algebra", json={**QA, "concepts": ["A", "B"]}, headers=keys["a_admin"])
    assert client.post("/v1/diagnose", json=diag, headers=keys["a_client"]).json()["calibration_id"] is None
    r = client.post("/v1/diagnose", json={**diag, "calibration_id": cal}, headers=keys["a_client"])
    assert r.status_code == 422 and "version 1" in r.text


def test_the_shared_example_and_its_calibration_are_read_only_for_everyone(two: tuple[TestClient, dict]) -> None:
    client, keys = two
    for key in keys.values():
        assert client.get("/v1/qmatrices/example-prealgebra", headers=key).json()["builtin"] is True
    assert client.delete("/v1/qmatrices/example-prealgebra", headers=keys["a_admin"]).status_code == 409


def test_student_budgets_and_stored_answers_are_per_tenant(two: tuple[TestClient, dict]) -> None:
    client, keys = two
    assert client.post("/v1/qmatrices", json=QA, headers=keys["b_admin"]).status_code == 201
    diag = {"student_id": "alice", "qmatrix_id": "algebra", "responses": RESPONSES, "epsilon": 1.0}
    a = client.post("/v1/diagnose", json=diag, headers=keys["a_client"]).json()
    b = client.post("/v1/diagnose", json=diag, headers=keys["b_client"]).json()
    # An identical request by B is not A's stored answer: B is charged and gets fresh noise.
    assert b["budget"]["repeat"] is False and b["request_id"] != a["request_id"]
    assert client.post("/v1/privacy/lookup", json={"student_id": "alice"}, headers=keys["a_client"]).json()["queries"] == 1
    assert client.post("/v1/privacy/lookup", json={"student_id": "alice"}, headers=keys["b_client"]).json()["queries"] == 1
    again = client.post("/v1/diagnose", json=diag, headers=keys["a_client"]).json()
    assert again["budget"]["repeat"] is True and again["request_id"] == a["request_id"]


def test_cohort_reports_use_only_the_tenants_qmatrices(two: tuple[TestClient, dict]) -> None:
    client, keys = two
    students = [{"student_id": f"c{k}", "responses": RESPONSES} for k in range(12)]
    body = {"qmatrix_id": "algebra", "students": students, "epsilon": 1.0}
    assert client.post("/v1/cohort-report", json=body, headers=keys["a_client"]).status_code == 200
    assert client.post("/v1/cohort-report", json=body, headers=keys["b_client"]).status_code == 404


def test_a_failed_request_after_the_charge_is_refunded(tmp_path: Path) -> None:
    entities = {"ok": FakeEntity("ok", 0.5), "bug": FakeEntity("bug", error=RuntimeError("a bug in an adapter"))}
    with make_client(tmp_path, entities, privacy_cap_epsilon=10.0) as client:
        client_raise = TestClient(client.app, raise_server_exceptions=False, headers=client.headers)
        r = client_raise.post("/v1/diagnose", json={
            "student_id": "s", "qmatrix_id": "example-prealgebra", "epsilon": 1.0,
            "responses": [{"item_id": "q01", "correct": True}],
        })
        assert r.status_code == 500
        status = client.post("/v1/privacy/lookup", json={"student_id": "s"}).json()
        assert status["spent_epsilon"] == 0.0 and status["queries"] == 0


def test_an_entity_that_answers_no_concept_is_not_charged(tmp_path: Path) -> None:
    entities = {"ok": FakeEntity("ok", 0.5), "blank": FakeEntity("blank", {})}
    with make_client(tmp_path, entities, privacy_cap_epsilon=10.0) as client:
        r = client.post("/v1/diagnose", json={
            "student_id": "s", "qmatrix_id": "example-prealgebra", "epsilon": 1.0,
            "responses": [{"item_id": "q01", "correct": True}],
        })
        assert r.status_code == 200, r.text
        assert r.json()["budget"]["charged_epsilon"] == 1.0  # 'ok' only
        status = client.post("/v1/privacy/lookup", json={"student_id": "s"}).json()
        assert status["spent_epsilon"] == 1.0 and status["queries"] == 1
