"""A deleted Q-matrix is gone, every version of it; an id is never '.' or '..' (each once came back, or was made)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

CSV = "item_id,text,Alpha,Beta\ni1,1+1,1,0\ni2,2x=4,0,1\n"
Q = {"id": "mine", "concepts": ["A"], "items": [{"id": "i1", "concepts": ["A"]}]}


def test_a_deleted_qmatrix_is_not_found_by_version_either(client: TestClient) -> None:
    # Prepare: two versions, then deleted
    assert client.post("/v1/qmatrices", json=Q).status_code == 201
    assert client.put("/v1/qmatrices/mine", json=Q).status_code == 200
    assert client.get("/v1/qmatrices/mine", params={"version": 1}).status_code == 200  # read (and cached) before
    assert client.delete("/v1/qmatrices/mine").status_code in (200, 204)

    # Execute / Assert: the current one and each named version are 404s
    assert client.get("/v1/qmatrices/mine").status_code == 404
    assert client.get("/v1/qmatrices/mine", params={"version": 1}).status_code == 404
    assert client.get("/v1/qmatrices/mine", params={"version": 2}).status_code == 404

    # ... and registered again, its new version is read; the deleted ones stay gone
    assert client.post("/v1/qmatrices", json=Q).status_code == 201
    assert client.get("/v1/qmatrices/mine", params={"version": 3}).status_code == 200
    assert client.get("/v1/qmatrices/mine", params={"version": 1}).status_code == 404


@pytest.mark.parametrize("qid", [".", ".."])
def test_an_id_naming_a_folder_or_its_parent_is_refused(client: TestClient, qid: str) -> None:
    r = client.post("/v1/qmatrices", json={**Q, "id": qid})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "id"]
    assert qid not in client.get("/v1/qmatrices").json()["data"]


def test_an_upload_named_with_dots_alone_makes_no_qmatrix(client: TestClient) -> None:
    # The id comes from the file name's stem: '...csv' -> '..'
    r = client.post("/v1/qmatrices", files={"file": ("...csv", CSV, "text/csv")})
    assert r.status_code == 422, r.text
    assert ".." not in client.get("/v1/qmatrices").json()["data"]
    assert client.post("/v1/qmatrices", json={**Q, "id": "v1.2"}).status_code == 201  # dots among others are fine
    # '...' names nothing special, and such ids were stored before the rule: still valid
    assert client.post("/v1/qmatrices", json={**Q, "id": "..."}).status_code == 201
