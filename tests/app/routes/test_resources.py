"""Q-matrix registration and reads, entities, health, OpenAPI."""

from __future__ import annotations

from fastapi.testclient import TestClient

CSV = "item_id,text,Alpha,Beta\ni1,1+1,1,0\ni2,2x=4,0,1\n"


def test_example_qmatrix_is_registered_at_start(client: TestClient) -> None:
    r = client.get("/v1/qmatrices/example-prealgebra")
    assert r.status_code == 200
    assert r.json()["builtin"] is True and r.json()["n_items"] == 12


def test_register_json_then_read_back(client: TestClient) -> None:
    q = {"id": "mine", "concepts": ["A", "B"], "items": [{"id": "i1", "text": "?", "concepts": ["A", "B"]}]}
    r = client.post("/v1/qmatrices", json=q)
    assert r.status_code == 201, r.text
    got = client.get("/v1/qmatrices/mine").json()
    assert got["concepts"] == ["A", "B"] and got["items"][0]["concepts"] == ["A", "B"]
    assert "mine" in client.get("/v1/qmatrices").json()["data"]


def test_register_csv_upload_and_text_body(client: TestClient) -> None:
    r = client.post("/v1/qmatrices", files={"file": ("algebra.csv", CSV, "text/csv")})
    assert r.status_code == 201, r.text
    assert r.json()["id"] == "algebra" and r.json()["concepts"] == ["Alpha", "Beta"]
    r = client.post("/v1/qmatrices?id=algebra2", content=CSV, headers={"content-type": "text/csv"})
    assert r.status_code == 201, r.text
    assert client.get("/v1/qmatrices/algebra2").json()["items"][1]["text"] == "2x=4"


def test_registered_qmatrix_survives_a_restart(tmp_path, fakes) -> None:  # type: ignore[no-untyped-def]
    from tests.app.conftest import make_client

    with make_client(tmp_path, fakes) as c:
        assert c.post("/v1/qmatrices?id=kept", content=CSV, headers={"content-type": "text/csv"}).status_code == 201
    with make_client(tmp_path, fakes) as c:
        assert c.get("/v1/qmatrices/kept").status_code == 200


def test_invalid_qmatrix_422_names_row_and_column(client: TestClient) -> None:
    bad_csv = "item_id,text,Alpha,Beta\ni1,,1,2\ni1,,0,0\n"
    r = client.post("/v1/qmatrices?id=bad", content=bad_csv, headers={"content-type": "text/csv"})
    assert r.status_code == 422
    assert "column 'Beta'" in r.text and "row 1" in r.text
    q = {"id": "bad", "concepts": ["A", "B"], "items": [{"id": "i1", "concepts": ["A", "C"]}]}
    r = client.post("/v1/qmatrices", json=q)
    assert r.status_code == 422
    assert "unknown concept 'C'" in r.text and "concept used by no item" in r.text


def test_qmatrix_schema_errors_name_the_field(client: TestClient) -> None:
    r = client.post("/v1/qmatrices", json={"id": "x", "concepts": ["A"]})
    assert r.status_code == 422 and "items" in r.text
    r = client.post("/v1/qmatrices", json={"id": "no spaces!", "concepts": ["A"], "items": [{"id": "i", "concepts": ["A"]}]})
    assert r.status_code == 422 and "id" in r.text
    r = client.post("/v1/qmatrices", content=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_builtin_cannot_be_replaced_and_unknown_is_404(client: TestClient) -> None:
    q = {"id": "example-prealgebra", "concepts": ["A"], "items": [{"id": "i", "concepts": ["A"]}]}
    assert client.post("/v1/qmatrices", json=q).status_code == 409
    assert client.get("/v1/qmatrices/nope").status_code == 404


def test_entities_health_and_docs(client: TestClient) -> None:
    entities = client.get("/v1/entities").json()
    assert entities["count"] == 2 and {e["name"] for e in entities["data"]} == {"alpha", "beta"}
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["entities"] == 2
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/v1/diagnose", "/v1/diagnose/batch", "/v1/qmatrices", "/v1/entities", "/healthz"} <= set(spec["paths"])
