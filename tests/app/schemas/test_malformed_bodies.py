"""Hostile input is a 4xx with valid JSON naming the problem — never a 500 (issue: robustness)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from privacy import MECHANISM_NAMES

BODY = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}


def _raw(client: TestClient, path: str, raw: bytes, content_type: str = "application/json"):  # type: ignore[no-untyped-def]
    return client.post(path, content=raw, headers={"content-type": content_type})


@pytest.mark.parametrize("raw", [
    b'{"student_id": "s1", "qmatrix_id": "example-prealgebra", "epsilon": NaN, "responses": []}',
    b'{"student_id": "s1", "qmatrix_id": "example-prealgebra", "epsilon": Infinity, "responses": []}',
    b'{"student_id": "s1", "qmatrix_id": "example-prealgebra", "epsilon": -Infinity, "responses": []}',
    b'{"student_id": "\\ud800", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": true}]}',
    b'{"student_id": "s1", "qmatrix_id": "\\udfff\\ud800", "responses": [{"item_id": "\\ud83d", "correct": 1e999}]}',
    b'{"student_id": "\xff\xfe\xfa", "qmatrix_id": "x", "responses": []}',
    b"\xff\xfe\x00\x01",
    b'{"responses": [' + b'{"item_id": "q01", "correct": NaN},' * 3 + b'1]}',
])
def test_unencodable_input_gets_a_valid_json_422(client: TestClient, raw: bytes) -> None:
    r = _raw(client, "/v1/diagnose", raw)
    assert r.status_code == 422, r.text
    body = json.loads(r.content.decode("utf-8"))  # valid UTF-8 JSON, whatever came in
    assert body["detail"] and all("loc" in d and "msg" in d for d in body["detail"])


@pytest.mark.parametrize("student", ["victim ", " victim", "victim\u200b", "vic\u202etim", "victim\t"])
def test_lookalike_student_ids_are_422(client: TestClient, student: str) -> None:
    r = client.post("/v1/diagnose", json={**BODY, "student_id": student})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "student_id"]
    r = client.post("/v1/privacy/lookup", json={"student_id": student})
    assert r.status_code == 422


def test_csv_with_cr_only_line_endings_is_read(client: TestClient) -> None:
    csv = "item_id,text,A,B\ri1,1+1,1,0\ri2,2x=4,0,1\r"
    r = client.post("/v1/qmatrices?id=crlf", content=csv, headers={"content-type": "text/csv"})
    assert r.status_code == 201, r.text
    assert r.json()["n_items"] == 2


def test_csv_field_over_the_csv_limit_is_422(client: TestClient) -> None:
    csv = "item_id,text,A\ni1," + "x" * 140_000 + ",1\n"
    r = client.post("/v1/qmatrices?id=long", content=csv, headers={"content-type": "text/csv"})
    assert r.status_code == 422 and "field larger than field limit" in r.text


def test_multipart_header_with_a_cr_is_422(client: TestClient) -> None:
    boundary = "xyz"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\rb.csv\"\r\n"
            f"Content-Type: text/csv\r\n\r\nitem_id,text,A\ni1,,1\n\r\n--{boundary}--\r\n").encode()
    r = client.post("/v1/qmatrices", content=body, headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    assert 400 <= r.status_code < 500 and r.status_code != 400, r.text
    json.loads(r.content)


def test_an_unknown_query_parameter_is_422(client: TestClient) -> None:
    r = client.get("/v1/calibrations?qmatrx_id=x")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "qmatrx_id"]


def test_405_lists_every_allowed_method(client: TestClient) -> None:
    r = client.request("PATCH", "/v1/qmatrices")
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"GET", "POST"}
    r = client.request("PATCH", "/v1/qmatrices/x")
    assert set(r.headers["allow"].split(", ")) == {"GET", "PUT", "DELETE"}


@pytest.mark.parametrize("extra", [
    {"epsilon": 1e-300}, {"epsilon": 0}, {"epsilon": -1}, {"epsilon": 5000, "mechanism": "piecewise"},
    {"epsilon": 1e308, "mechanism": "laplace"}, {"epsilon": 1e308, "mechanism": "gaussian"},
    {"mechanism": "gaussian", "delta": 0.5}, {"mechanism": "gaussian", "delta": 1e-300},
])
def test_out_of_range_privacy_parameters_are_422(client: TestClient, extra: dict) -> None:
    r = client.post("/v1/diagnose", json={**BODY, **extra})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", next(iter(extra if "epsilon" in extra else {"delta": 0}))]


@pytest.mark.parametrize("mechanism", MECHANISM_NAMES)
@pytest.mark.parametrize("epsilon", [1e-3, 1000.0])
def test_every_mechanism_answers_at_both_ends_of_the_range(client: TestClient, mechanism: str, epsilon: float) -> None:
    r = client.post("/v1/diagnose", json={**BODY, "epsilon": epsilon, "mechanism": mechanism, "student_id": f"{mechanism}{epsilon}"})
    assert r.status_code == 200, r.text


def test_the_openapi_document_states_the_servers_limits(tmp_path, fakes) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import make_client

    with make_client(tmp_path, fakes, max_responses_per_student=77, max_batch_size=9) as client:
        spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert schemas["DiagnoseRequest"]["properties"]["responses"]["maxItems"] == 77
    assert schemas["BatchDiagnoseRequest"]["properties"]["students"]["maxItems"] == 9
    assert "413" in spec["paths"]["/v1/diagnose"]["post"]["responses"]
