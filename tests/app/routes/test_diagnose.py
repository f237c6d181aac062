"""The /v1/diagnose contract, bad input, and failures."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from tests.conftest import make_client
from tests.factories import FakeEntity

BODY = {
    "student_id": "s1",
    "qmatrix_id": "example-prealgebra",
    "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": 0.5, "answer": "x = 7"}],
}


def test_diagnose_returns_the_documented_fields(client: TestClient) -> None:
    r = client.post("/v1/diagnose", json={**BODY, "epsilon": 2.0, "mechanism": "laplace", "sensitivity": "paper", "include_entities": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) >= {"student_id", "mastery", "entities", "privacy", "calibration_id", "request_id"}
    assert body["student_id"] == "s1"
    assert set(body["mastery"]) == {"Add and subtract fractions", "Solve two-step linear equations"}
    assert all(0.0 <= v <= 1.0 for v in body["mastery"].values())
    assert [e["name"] for e in body["entities"]] == ["alpha", "beta"]
    for entity in body["entities"]:
        assert set(entity) >= {"name", "status", "latency_ms", "mastery"}
    assert body["privacy"]["mechanism"] == "laplace"
    assert body["privacy"]["epsilon"] == 2.0
    assert body["privacy"]["sensitivity"] == 6.0
    assert body["privacy"]["noise_scale"] == pytest.approx(3.0)
    assert body["calibration_id"] is None


def test_entities_are_omitted_unless_asked(client: TestClient) -> None:
    body = client.post("/v1/diagnose", json=BODY).json()
    assert body["entities"] is None


def test_server_defaults_apply_when_none_given(client: TestClient) -> None:
    # chosen from the privacy frontier: the anchored release at ε = 32 per entity answer, Bayes post-processing
    body = client.post("/v1/diagnose", json=BODY).json()
    assert body["privacy"]["epsilon"] == 32.0 and body["privacy"]["mechanism"] == "anchored_piecewise"
    assert body["aggregation"] == "posterior" and body["mastery_interval"] is not None


def test_epsilon_none_means_no_noise(client: TestClient) -> None:
    # the plain mean shows the raw answers (the posterior would not weigh these uncalibrated fakes: unknown skill)
    body = client.post("/v1/diagnose", json={**BODY, "epsilon": "none", "aggregation": "mean"}).json()
    assert body["privacy"]["mechanism"] == "none"
    assert all(v == pytest.approx(0.4) for v in body["mastery"].values())


def test_assessed_sensitivity_option(client: TestClient) -> None:
    body = client.post("/v1/diagnose", json={**BODY, "epsilon": 1.0, "sensitivity": "assessed"}).json()
    assert body["privacy"]["sensitivity"] == 2.0
    assert body["privacy"]["sensitivity_mode"] == "assessed"


def test_inline_qmatrix(client: TestClient) -> None:
    q = {"id": "inline", "concepts": ["A", "B"], "items": [{"id": "i1", "concepts": ["A"]}, {"id": "i2", "concepts": ["B"]}]}
    body = {"student_id": "s", "qmatrix": q, "responses": [{"item_id": "i2", "correct": False}], "epsilon": "none"}
    r = client.post("/v1/diagnose", json=body)
    assert r.status_code == 200, r.text
    assert set(r.json()["mastery"]) == {"B"}


def test_entity_selection(client: TestClient, fakes: dict[str, FakeEntity]) -> None:
    r = client.post("/v1/diagnose", json={**BODY, "entities": ["beta"], "include_entities": True})
    assert [e["name"] for e in r.json()["entities"]] == ["beta"]
    assert not fakes["alpha"].contexts


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"responses": []}, "responses"),
        ({"responses": [{"item_id": "q01", "correct": 1.5}]}, "correct"),
        ({"responses": [{"item_id": "q01"}]}, "correct"),
        ({"epsilon": -1}, "epsilon"),
        ({"epsilon": "lots"}, "epsilon"),
        ({"student_id": ""}, "student_id"),
        ({"sensitivity": "huge"}, "sensitivity"),
        ({"unexpected": 1}, "unexpected"),
    ],
)
def test_bad_input_is_422_naming_the_field(client: TestClient, patch: dict[str, object], field: str) -> None:
    r = client.post("/v1/diagnose", json={**BODY, **patch})
    assert r.status_code == 422, r.text
    assert field in r.text


def test_unknown_items_are_listed(client: TestClient) -> None:
    responses = [{"item_id": "q01", "correct": True}, {"item_id": "zz9", "correct": True}, {"item_id": "zz8", "correct": False}]
    r = client.post("/v1/diagnose", json={**BODY, "responses": responses})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "responses"]
    assert detail["unknown_item_ids"] == ["zz9", "zz8"]


def test_unknown_qmatrix_is_404_and_both_or_neither_is_422(client: TestClient) -> None:
    assert client.post("/v1/diagnose", json={**BODY, "qmatrix_id": "nope"}).status_code == 404
    neither = {k: v for k, v in BODY.items() if k != "qmatrix_id"}
    r = client.post("/v1/diagnose", json=neither)
    assert r.status_code == 422 and "qmatrix" in r.text


def test_unknown_entity_is_422_and_unknown_calibration_404(client: TestClient) -> None:
    r = client.post("/v1/diagnose", json={**BODY, "entities": ["ghost"]})
    assert r.status_code == 422 and "ghost" in r.text and r.json()["detail"][0]["loc"] == ["body", "entities"]
    r = client.post("/v1/diagnose", json={**BODY, "calibration_id": "cal-x"})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["body", "calibration_id"]


def test_all_entities_failed_is_503_with_reasons(failing_client: TestClient) -> None:
    r = failing_client.post("/v1/diagnose", json=BODY)
    assert r.status_code == 503
    reasons = {e["name"]: e["error"] for e in r.json()["entities"]}
    assert "401" in reasons["alpha"] and "404" in reasons["beta"]


def test_malformed_json_body_is_422_not_500(client: TestClient) -> None:
    r = client.post("/v1/diagnose", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_batch_diagnoses_every_student(client: TestClient) -> None:
    students = [{"student_id": f"s{n}", "responses": BODY["responses"]} for n in range(5)]
    r = client.post("/v1/diagnose/batch", json={"qmatrix_id": "example-prealgebra", "students": students, "epsilon": "none"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 5 and body["errors"] == []
    assert [x["student_id"] for x in body["results"]] == [f"s{n}" for n in range(5)]


def test_batch_names_the_student_with_unknown_items(client: TestClient) -> None:
    students = [
        {"student_id": "ok", "responses": [{"item_id": "q01", "correct": True}]},
        {"student_id": "bad", "responses": [{"item_id": "nope", "correct": True}]},
    ]
    r = client.post("/v1/diagnose/batch", json={"qmatrix_id": "example-prealgebra", "students": students})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "students", 1, "responses"]


def test_batch_reports_students_whose_entities_all_failed(failing_client: TestClient) -> None:
    students = [{"student_id": "s1", "responses": BODY["responses"]}]
    r = failing_client.post("/v1/diagnose/batch", json={"qmatrix_id": "example-prealgebra", "students": students})
    assert r.status_code == 200
    assert r.json()["errors"][0]["status_code"] == 503


def test_batch_runs_students_concurrently_with_a_bound(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.app.conftest import make_client

    slow = FakeEntity("slow", 0.5, delay_s=0.02)
    with make_client(tmp_path, {"slow": slow}, batch_concurrency=3) as c:
        students = [{"student_id": f"s{n}", "responses": BODY["responses"]} for n in range(9)]
        r = c.post("/v1/diagnose/batch", json={"qmatrix_id": "example-prealgebra", "students": students})
    assert r.status_code == 200
    assert slow.max_in_flight == 3


@pytest.mark.parametrize("mechanism", ["secure_laplace", "gaussian", "duchi", "piecewise", "hybrid", "anchored_piecewise"])
def test_mechanism_is_chosen_per_request(client: TestClient, mechanism: str) -> None:
    r = client.post("/v1/diagnose", json={**BODY, "epsilon": 4.0, "mechanism": mechanism, "sensitivity": "assessed"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["privacy"]["mechanism"] == ("analytic_gaussian" if mechanism == "gaussian" else mechanism)
    assert all(0.0 <= v <= 1.0 for v in body["mastery"].values())


def test_unknown_mechanism_is_422(client: TestClient) -> None:
    r = client.post("/v1/diagnose", json={**BODY, "mechanism": "magic"})
    assert r.status_code == 422 and "mechanism" in r.text


@pytest.mark.parametrize("epsilon", [2.0, "none"])
def test_with_no_entity_to_ask_a_diagnosis_is_503_naming_why_and_charges_nothing(
    tmp_path: Path, epsilon: float | str
) -> None:
    # Before: the ledger was asked to charge 0 releases (ValueError: a 500) when the request was noised.
    with make_client(tmp_path, {}) as c:  # an empty federation: every entity dropped, none configured
        single = c.post("/v1/diagnose", json={**BODY, "epsilon": epsilon})
        batch = c.post("/v1/diagnose/batch", json={
            "qmatrix_id": "example-prealgebra", "epsilon": epsilon,
            "students": [{"student_id": "s1", "responses": BODY["responses"]}],
        })
        budget = c.get("/v1/privacy/students/s1").json()
    for r in (single, batch):
        assert r.status_code == 503, r.text
        assert r.json()["detail"] == "no entity to ask: the federation has no entities; no diagnosis was made"
    assert budget["queries"] == 0 and budget["spent_epsilon"] == 0.0



def _is_the_models_json(r: httpx.Response, model: type[BaseModel]) -> None:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == model.model_validate(r.json()).model_dump(mode="json")


def test_answers_are_the_response_models_json(client: TestClient) -> None:
    # The routes serialize the model once themselves (app.routes.diagnose): the body must still be exactly the
    # documented model, every field present (none dropped as unset), as FastAPI's response_model would send it.
    from app.schemas import BatchDiagnoseResponse, DiagnoseResponse

    _is_the_models_json(client.post("/v1/diagnose", json={**BODY, "include_entities": True}), DiagnoseResponse)
    students = [{"student_id": "s1", "responses": BODY["responses"]}]
    batch = client.post("/v1/diagnose/batch", json={"qmatrix_id": "example-prealgebra", "students": students})
    _is_the_models_json(batch, BatchDiagnoseResponse)


def test_a_batch_errors_free_form_detail_is_sent_whole(failing_client: TestClient) -> None:
    from app.schemas import BatchDiagnoseResponse

    students = [{"student_id": "s1", "responses": BODY["responses"]}]
    r = failing_client.post("/v1/diagnose/batch", json={"qmatrix_id": "example-prealgebra", "students": students})
    _is_the_models_json(r, BatchDiagnoseResponse)
    detail = r.json()["errors"][0]["detail"]
    assert [e["name"] for e in detail["entities"]] == ["alpha", "beta"] and detail["message"]
