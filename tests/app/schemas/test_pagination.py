"""Cursor pagination, the same on every list route: ``?limit=`` and ``?cursor=`` in, ``{data, count, limit,
next_cursor}`` out; ``GET /v1/jobs`` newest first and filtered by kind and state. Pages are keyset-based: an item
added between two requests never makes another one appear twice or not at all."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.db import JobRow
from calibration import BiasParams, CalibrationRecord
from tests.conftest import bearer, make_client
from tests.factories import FakeEntity

QM = "item_id,text,A\ni1,?,1\n"


def _all(client: TestClient, path: str, limit: int, headers: dict[str, str] | None = None,
         **params: Any) -> tuple[list[Any], int]:
    """Every item of a list, page by page; and how many pages it took."""
    items: list[Any] = []
    cursor, pages = None, 0
    while True:
        query = {"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
        r = client.get(path, params=query, headers=headers or {})
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["count"] == len(page["data"]) <= limit and page["limit"] == limit
        items += page["data"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return items, pages
        assert pages < 100


@pytest.fixture
def client(tmp_path: Path):  # type: ignore[no-untyped-def]
    entities = {"a": FakeEntity("a", 0.4), "b": FakeEntity("b", 0.5), "c": FakeEntity("c", 0.6)}
    with make_client(tmp_path, entities) as c:
        yield c


def _qmatrix(client: TestClient, qid: str) -> None:
    r = client.post(f"/v1/qmatrices?id={qid}", content=QM, headers={"content-type": "text/csv"})
    assert r.status_code == 201, r.text


def test_qmatrix_ids_page_by_page_builtin_first(client: TestClient) -> None:
    for qid in ("delta", "alpha", "echo", "charlie", "bravo"):
        _qmatrix(client, qid)
    ids, pages = _all(client, "/v1/qmatrices", 2)
    assert ids == ["example-prealgebra", "alpha", "bravo", "charlie", "delta", "echo"] and pages == 3
    whole = client.get("/v1/qmatrices").json()  # the default limit holds them all: one page
    assert whole["data"] == ids and whole["next_cursor"] is None


def test_an_item_added_between_pages_shifts_nothing(client: TestClient) -> None:
    for qid in ("b", "d", "f", "h"):
        _qmatrix(client, qid)
    first = client.get("/v1/qmatrices", params={"limit": 3}).json()
    assert first["data"] == ["example-prealgebra", "b", "d"]
    _qmatrix(client, "a")  # sorts before the cursor: an offset would send "d" again
    client.delete("/v1/qmatrices/f")
    second = client.get("/v1/qmatrices", params={"limit": 3, "cursor": first["next_cursor"]}).json()
    assert second["data"] == ["h"] and second["next_cursor"] is None


def test_keys_policy_versions_entities_and_calibrations_page_the_same_way(client: TestClient) -> None:
    made = [client.post("/v1/admin/keys", json={"role": "client"}).json()["key_id"] for _ in range(4)]
    keys, _ = _all(client, "/v1/admin/keys", 2)
    assert [k["key_id"] for k in keys][-4:] == made and len({k["key_id"] for k in keys}) == len(keys) == 5

    policy = {"period": {"kind": "lifetime"}, "cap_epsilon": 10.0, "cap_delta": 1e-4, "default_mechanism": "laplace",
              "default_epsilon": 1.0, "sensitivity": "assessed", "allow_unnoised": False, "warning_fraction": 0.2}
    for cap in (10.0, 20.0, 30.0):
        assert client.put("/v1/admin/privacy-policy", json={**policy, "cap_epsilon": cap}).status_code == 200
    versions, pages = _all(client, "/v1/admin/privacy-policy/history", 2)
    assert [v["version"] for v in versions] == [1, 2, 3] and pages == 2

    entities, pages = _all(client, "/v1/entities", 1)
    assert [e["name"] for e in entities] == ["a", "b", "c"] and pages == 3  # the federation's order

    store = client.app.state.gateway.calibrations  # type: ignore[attr-defined]
    for n in range(3):
        record = CalibrationRecord(id=f"cal-{n}", qmatrix_id="example-prealgebra", params=BiasParams(alpha=0.5),
                                   version=n + 1)
        store.save(record, tenant="default", qmatrix_version=1)
    calibrations, pages = _all(client, "/v1/calibrations", 2, qmatrix_id="example-prealgebra")
    assert [c["id"] for c in calibrations] == ["cal-0", "cal-1", "cal-2"] and pages == 2


def _job(client: TestClient, job_id: str, *, tenant: str = "default", kind: str = "calibrate",
         status: str = "succeeded", created_at: str) -> None:
    # Rows written directly, finished already: the runner claims only queued and running jobs, so they stay as made.
    with client.app.state.gateway.database.sessions.begin() as session:  # type: ignore[attr-defined]
        session.add(JobRow(id=job_id, tenant=tenant, kind=kind, status=status, request_json="{}",
                           created_at=created_at, updated_at=created_at))


def test_jobs_newest_first_by_cursor_and_filtered_by_kind_and_state(client: TestClient) -> None:
    # Prepare: six jobs of the tenant (two made in the same microsecond: the id breaks the tie), one of another
    at = "2026-03-0{}T10:00:00+00:00"
    _job(client, "j1", created_at=at.format(1), kind="train")
    _job(client, "j2", created_at=at.format(2), status="failed")
    _job(client, "j3a", created_at=at.format(3))
    _job(client, "j3b", created_at=at.format(3), kind="train", status="failed")
    _job(client, "j4", created_at=at.format(4), kind="train")
    _job(client, "j5", created_at=at.format(5))
    _job(client, "theirs", created_at=at.format(6), tenant="other")

    # Execute and assert: every job once, newest first, whatever the page size
    for limit in (1, 2, 4, 50):
        jobs, _ = _all(client, "/v1/jobs", limit)
        assert [j["job_id"] for j in jobs] == ["j5", "j4", "j3b", "j3a", "j2", "j1"], limit
    trains, _ = _all(client, "/v1/jobs", 1, kind="train")
    assert [j["job_id"] for j in trains] == ["j4", "j3b", "j1"]
    failed, _ = _all(client, "/v1/jobs", 1, state="failed")
    assert [j["job_id"] for j in failed] == ["j3b", "j2"]
    both = client.get("/v1/jobs", params={"kind": "train", "state": "failed"}).json()
    assert [j["job_id"] for j in both["data"]] == ["j3b"]
    several = client.get("/v1/jobs", params=[("state", "failed"), ("state", "queued"), ("kind", "calibrate")]).json()
    assert [j["job_id"] for j in several["data"]] == ["j2"]
    theirs = client.get("/v1/jobs", headers=bearer(client, tenant="other", role="admin")).json()
    assert [j["job_id"] for j in theirs["data"]] == ["theirs"]


def test_a_job_submitted_between_pages_shifts_nothing(client: TestClient) -> None:
    for n in range(1, 4):
        _job(client, f"j{n}", created_at=f"2026-03-0{n}T10:00:00+00:00")
    first = client.get("/v1/jobs", params={"limit": 2}).json()
    _job(client, "newer", created_at="2026-03-09T10:00:00+00:00")
    second = client.get("/v1/jobs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [j["job_id"] for j in first["data"] + second["data"]] == ["j3", "j2", "j1"]


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@pytest.mark.parametrize("params,needle", [
    ({"limit": 0}, "limit"),
    ({"limit": 201}, "limit"),
    ({"cursor": "not a cursor!"}, "not a cursor"),
    ({"cursor": ""}, "not a cursor"),
    ({"cursor": f"keys~1.5~{_b64('k')}"}, "another list"),
    ({"cursor": f"jobs~{_b64('2026-03-01')}"}, "not a cursor"),  # one key part of two
    ({"cursor": f"jobs~{_b64('a')}~A"}, "not a cursor"),  # a base64 length that decodes to nothing
    ({"offset": 1}, "unknown query parameter"),
    ({"state": "sleeping"}, "state"),
])
def test_bad_pages_are_422_naming_the_parameter(client: TestClient, params: dict, needle: str) -> None:
    r = client.get("/v1/jobs", params=params)
    assert r.status_code == 422 and needle in r.text, r.text
    assert r.json()["detail"][0]["loc"][0] == "query"


def test_a_cursor_of_one_list_is_refused_by_another(client: TestClient) -> None:
    _qmatrix(client, "x")
    cursor = client.get("/v1/qmatrices", params={"limit": 1}).json()["next_cursor"]
    for path in ("/v1/jobs", "/v1/admin/keys", "/v1/entities"):
        r = client.get(path, params={"cursor": cursor})
        assert r.status_code == 422 and "another list" in r.text, (path, r.text)
    # An edited cursor of the right list but a key of the wrong shape: still a 422, never a 500
    r = client.get("/v1/qmatrices", params={"cursor": f"qmatrices~{_b64('x')}~{_b64('x')}"})
    assert r.status_code == 422 and "cursor" in r.text


def test_every_cursor_the_schema_allows_is_a_page(client: TestClient) -> None:
    """The cursor parameter's pattern (in the OpenAPI schema) is exact: whatever matches it is a page of the list —
    a forged key only moves within the tenant's own list — and the pattern is the one the server checks."""
    _qmatrix(client, "m")
    params = {p["name"]: p["schema"] for p in client.get("/openapi.json").json()["paths"]["/v1/jobs"]["get"]["parameters"]}
    pattern = re.compile(params["cursor"]["anyOf"][0]["pattern"])
    forged = [f"jobs~{_b64('')}~", "jobs~AA~AA", "jobs~_-8~QR", f"jobs~{_b64('9999-12-31T00:00:00+00:00')}~{_b64('z')}"]
    for cursor in forged:
        assert pattern.fullmatch(cursor), cursor
        r = client.get("/v1/jobs", params={"cursor": cursor})
        assert r.status_code == 200 and r.json()["data"] == [], (cursor, r.text)  # the tenant has no job
    for cursor in ("qmatrices~-5~", "qmatrices~0~" + _b64("\x00\ufffd"), "qmatrices~1~" + _b64("a")):
        r = client.get("/v1/qmatrices", params={"cursor": cursor})
        assert r.status_code == 200, (cursor, r.text)
    assert client.get("/v1/qmatrices", params={"cursor": "qmatrices~1~" + _b64("a")}).json()["data"] == ["m"]
