"""Free-text ids in paths, queries and bodies are checked before they reach SQL: a NUL (PostgreSQL refuses one in a
text parameter) or another control character is a 422 naming the field, on both engines, never a 500; a
well-formed id that names nothing stays a 404, as before."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.app.console.test_console import csrf, sign_in
from tests.conftest import make_client
from tests.factories import FakeEntity

# Every test here runs on both engines (SQLite and PostgreSQL).
pytestmark = pytest.mark.usefixtures("both_engines")

BAD = "a%00b"  # a NUL, percent-encoded in a path or query
QA = {"id": "algebra", "concepts": ["A", "B"], "items": [
    {"id": "i1", "text": "x+1=2", "concepts": ["A"]}, {"id": "i2", "text": "2x=4", "concepts": ["B"]},
]}
RESPONSES = [{"item_id": "i1", "correct": True}, {"item_id": "i2", "correct": False}]

# (method, path, the loc of the 422) for every route that takes a free-text id in its path or query.
PARAMS = [
    ("GET", f"/v1/jobs/{BAD}", ["path", "job_id"]),
    ("POST", f"/v1/jobs/{BAD}/cancel", ["path", "job_id"]),
    ("GET", f"/v1/calibrate/{BAD}", ["path", "job_id"]),
    ("GET", f"/v1/calibrations/{BAD}", ["path", "calibration_id"]),
    ("GET", f"/v1/calibrations?qmatrix_id={BAD}", ["query", "qmatrix_id"]),
    ("DELETE", f"/v1/admin/keys/{BAD}", ["path", "key_id"]),
    ("GET", f"/v1/qmatrices/{BAD}", ["path", "qmatrix_id"]),
    ("DELETE", f"/v1/qmatrices/{BAD}", ["path", "qmatrix_id"]),
    ("PUT", f"/v1/qmatrices/{BAD}", ["path", "qmatrix_id"]),
    ("POST", f"/v1/qmatrices/{BAD}/train", ["path", "qmatrix_id"]),
    ("GET", f"/v1/local-model?qmatrix_id={BAD}", ["query", "qmatrix_id"]),
]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with make_client(tmp_path, {"e": FakeEntity("e", 0.4)}) as c:
        assert c.post("/v1/qmatrices", json=QA).status_code == 201
        yield c


def _locs(response: object) -> list[list[object]]:
    return [e["loc"] for e in response.json()["detail"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("method", "path", "loc"), PARAMS, ids=[f"{m} {p}" for m, p, _ in PARAMS])
def test_a_nul_in_an_id_parameter_is_a_422_naming_it(
    client: TestClient, method: str, path: str, loc: list[str],
) -> None:
    r = client.request(method, path, json=QA if method == "PUT" else None)
    assert r.status_code == 422, r.text
    assert loc in _locs(r)


def test_well_formed_unknown_ids_are_still_404(client: TestClient) -> None:
    for method, path in [("GET", "/v1/jobs/nope"), ("POST", "/v1/jobs/nope/cancel"), ("GET", "/v1/calibrate/nope"),
                         ("GET", "/v1/calibrations/cal-nope"), ("DELETE", "/v1/admin/keys/abcdefabcdef"),
                         ("GET", "/v1/qmatrices/nope"), ("DELETE", "/v1/qmatrices/nope")]:
        assert client.request(method, path).status_code == 404, (method, path)
    assert client.get("/v1/calibrations?qmatrix_id=nope").json()["count"] == 0


def test_a_nul_in_the_diagnose_calibration_id_is_a_422_naming_it(client: TestClient) -> None:
    body = {"student_id": "s", "qmatrix_id": "algebra", "responses": RESPONSES, "calibration_id": "a\x00b"}
    r = client.post("/v1/diagnose", json=body)
    assert r.status_code == 422 and ["body", "calibration_id"] in _locs(r), r.text
    unknown = client.post("/v1/diagnose", json={**body, "calibration_id": "cal-nope"})
    assert unknown.status_code == 404 and ["body", "calibration_id"] in _locs(unknown), unknown.text


def test_body_qmatrix_ids_with_a_nul_never_reach_sql(client: TestClient) -> None:
    """The Q-matrix store refuses an id outside its own form before any query: an unknown id, 404 (as before)."""
    diagnose = {"student_id": "s", "qmatrix_id": "a\x00b", "responses": RESPONSES}
    cohort = {"qmatrix_id": "a\x00b", "epsilon": 1.0, "students": [{"student_id": "s", "responses": RESPONSES}]}
    records = [{"student_id": f"v{k}", "responses": RESPONSES, "truth": {"A": 0.9, "B": 0.1}} for k in range(5)]
    for path, body in [("/v1/diagnose", diagnose), ("/v1/cohort-report", cohort),
                       ("/v1/calibrate", {"qmatrix_id": "a\x00b", "records": records})]:
        r = client.post(path, json=body)
        assert r.status_code == 404 and ["body", "qmatrix_id"] in _locs(r), (path, r.text)


def test_a_console_jobs_cursor_with_a_nul_is_a_422_page(client: TestClient) -> None:
    client.headers.pop("Authorization")
    sign_in(client)
    for key in (["2026-01-01T00:00:00", "a\x00b"], ["2026\x00", "abc"], ["2026", "\ud800"]):
        cursor = base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")
        r = client.get(f"/console/jobs?cursor={cursor}")
        assert r.status_code == 422, r.text
    assert client.get("/console/jobs").status_code == 200


def test_console_pages_that_take_an_id_answer_a_nul_with_the_404_page(client: TestClient) -> None:
    # Prepare: signed in to the console (a NUL id reached PostgreSQL from these pages: a 500)
    client.headers.pop("Authorization")
    sign_in(client)

    # Execute / Assert: a job page, its progress, its cancel and a key's revoke name nothing
    assert client.get(f"/console/jobs/{BAD}").status_code == 404
    assert client.get(f"/console/jobs/{BAD}/progress.json").status_code == 404
    assert client.post(f"/console/jobs/{BAD}/cancel", data={"csrf": csrf(client)}).status_code == 404
    assert client.post(f"/console/keys/{BAD}/revoke", data={"csrf": csrf(client)}).status_code == 404
