"""What the diagnosis routes send is what the OpenAPI document promises: every documented field, valid against the
response schema, content type JSON. A guard for cuts to their serialization (FastAPI's own ``dump_json`` path today;
a route that returned its own ``Response`` would have to keep this)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from app.schemas import BatchDiagnoseResponse, DiagnoseResponse

BODY = {
    "student_id": "s1",
    "qmatrix_id": "example-prealgebra",
    "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": 0.5, "answer": "x = 7"}],
}
BATCH = {"qmatrix_id": "example-prealgebra", "epsilon": "none", "students": [
    {"student_id": "s1", "responses": [{"item_id": "q01", "correct": True}]},
    {"student_id": "s2", "responses": [{"item_id": "q02", "correct": False}]},
]}


def _documented(client: TestClient, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The 200 response schema of ``POST path`` (a ``$ref``), and the document whose components it refers to."""
    document = client.get("/openapi.json").json()
    schema = document["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    return schema, document


@pytest.mark.parametrize(("path", "body", "model"), [
    ("/v1/diagnose", {**BODY, "epsilon": 2.0, "mechanism": "laplace", "include_entities": True}, DiagnoseResponse),
    ("/v1/diagnose/batch", BATCH, BatchDiagnoseResponse),
])
def test_the_body_sent_is_the_documented_response(
    client: TestClient, path: str, body: dict[str, Any], model: type[DiagnoseResponse | BatchDiagnoseResponse],
) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    schema, document = _documented(client, path)
    assert schema["$ref"].rsplit("/", 1)[1] == model.__name__  # response_model still documents the route
    sent = r.json()
    Draft202012Validator({**schema, "components": document["components"]}).validate(sent)
    # every documented field is sent (None ones too, as FastAPI's own serialization did), and nothing else
    assert set(sent) == set(document["components"]["schemas"][model.__name__]["properties"])
    assert model.model_validate_json(r.content).model_dump(mode="json") == sent


def test_a_repeat_is_sent_like_the_first_answer(client: TestClient) -> None:
    first = client.post("/v1/diagnose", json={**BODY, "epsilon": 2.0, "mechanism": "laplace"})
    again = client.post("/v1/diagnose", json={**BODY, "epsilon": 2.0, "mechanism": "laplace"})
    assert first.status_code == again.status_code == 200
    assert set(again.json()) == set(first.json())
    assert again.json()["mastery"] == first.json()["mastery"]
