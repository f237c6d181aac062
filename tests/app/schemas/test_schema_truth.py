"""The OpenAPI schema says what the server enforces (issue 37): a request the schema allows is not refused for its
shape, and one it forbids is refused. Each test validates bodies against the served schema (jsonschema_rs, the
validator schemathesis uses) and sends them, so the two readings are compared, not assumed."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from qmatrix import identifier_problem
from tests.conftest import make_client
from tests.factories import FakeEntity


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with make_client(tmp_path_factory.mktemp("schema"), {"a": FakeEntity("a", 0.4)}) as c:
        yield c


@pytest.fixture(scope="module")
def spec(client: TestClient) -> dict[str, Any]:
    return client.get("/openapi.json").json()


def _validator(spec: dict[str, Any], name: str) -> Any:
    return jsonschema_rs.validator_for({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})


def _samples(seed: int, n: int) -> list[str]:
    """Short strings over all of Unicode (no lone surrogates: no UTF-8 text carries one), weighted to the edges."""
    rng = random.Random(seed)
    picks = [lambda: rng.randint(0x20, 0x7E), lambda: rng.randint(0, 0x3000), lambda: rng.randint(0, 0x10FFFF),
             lambda: rng.choice([0x20, 0x09, 0x85, 0xA0, 0x200B, 0x2028, 0xFEFF, 0xE000, 0xE0001, 0x1680])]
    out = [" a", "a ", "a b", "\u200b", "\t", "   ", " x ", "x\u2028", "\U000e0001", "q01"]
    while len(out) < n:
        codes = [rng.choice(picks)() for _ in range(rng.randint(1, 4))]
        out.append("".join(chr(c) for c in codes if not 0xD800 <= c <= 0xDFFF) or "a")
    return out


def test_the_id_and_name_patterns_are_the_checks_they_document(spec: dict[str, Any]) -> None:
    ids = spec["components"]["schemas"]["StudentLookup"]["properties"]["student_id"]
    names = spec["components"]["schemas"]["QMatrixItem"]["properties"]["concepts"]["items"]
    id_schema = jsonschema_rs.validator_for({"type": "string", "pattern": ids["pattern"]})
    name_schema = jsonschema_rs.validator_for({"type": "string", "pattern": names["pattern"]})
    for text in _samples(7, 4000):
        assert id_schema.is_valid(text) == (identifier_problem(text) is None), ascii(text)
        assert name_schema.is_valid(text) == (identifier_problem(text, padded_ok=True) is None), ascii(text)


def test_item_ids_and_scores_of_responses_are_stated(spec: dict[str, Any]) -> None:
    response = spec["components"]["schemas"]["Response"]["properties"]
    assert "pattern" in response["item_id"]
    number = next(b for b in response["correct"]["anyOf"] if b.get("type") == "number")
    assert (number["minimum"], number["maximum"]) == (0.0, 1.0)


@pytest.mark.parametrize("body", [
    {"dataset": {"name": "synthetic", "max_students": 3}},
    {"records": [{"student_id": "s", "responses": [{"item_id": "q01", "correct": True}]}]},  # no qmatrix_id
    {"dataset": {"name": "synthetic"}, "records": [{"student_id": "s", "responses": [{"item_id": "q01", "correct": 1}]}],
     "qmatrix_id": "example-prealgebra"},  # both sources
    {},  # neither
    {"dataset": {"name": "synthetic"}, "isotonic": True, "method": "bias"},  # isotonic is for stacking
    {"dataset": {"name": "synthetic"}, "isotonic": True, "method": "stacking"},
    {"dataset": {"name": "synthetic", "max_students": 3.0, "seed": 2.0}},  # JSON Schema's integers
    {"dataset": {"name": "synthetic", "max_students": "3"}},
])
def test_calibrate_bodies_are_refused_exactly_when_the_schema_forbids_them(
    client: TestClient, spec: dict[str, Any], body: dict[str, Any]
) -> None:
    valid = _validator(spec, "CalibrateRequest").is_valid(body)
    r = client.post("/v1/calibrate", json=body)
    assert (r.status_code != 422) == valid, (body, valid, r.status_code, r.text)


@pytest.mark.parametrize("body,valid", [
    ({"student_id": "s", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}, True),
    ({"student_id": "s", "responses": [{"item_id": "q01", "correct": True}]}, False),  # no Q-matrix
    ({"student_id": "s", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}],
      "qmatrix": {"id": "m", "concepts": ["a"], "items": [{"id": "q01", "concepts": ["a"]}]}}, False),  # two
    ({"student_id": " s", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}, False),
    ({"student_id": "s", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": 1.5}]}, False),
])
def test_diagnose_bodies_agree_with_the_schema(client: TestClient, spec: dict[str, Any], body: dict[str, Any],
                                                valid: bool) -> None:
    assert _validator(spec, "DiagnoseRequest").is_valid(body) == valid
    r = client.post("/v1/diagnose", json={**body, "epsilon": "none"})
    assert (r.status_code == 200) == valid, r.text


def test_whole_numbers_are_integers_strings_are_not(client: TestClient) -> None:
    body = {"student_id": "s", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}
    assert client.post("/v1/next-items", json={**body, "count": 2.0}).status_code == 200
    for bad in ("2", True, 2.5):
        r = client.post("/v1/next-items", json={**body, "count": bad})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "count"], (bad, r.text)


def test_a_name_is_checked_where_it_is_not_used(client: TestClient) -> None:
    """Entities are ignored by keyword tagging, yet a name the schema forbids is still a 422 (it was accepted)."""
    body = {"id": "x", "items": [{"id": "i", "text": "add 1 and 2"}], "method": "keyword"}
    assert client.post("/v1/qmatrix-extractions", json={**body, "entities": ["a"]}).status_code == 200
    r = client.post("/v1/qmatrix-extractions", json={**body, "entities": ["\u009b"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "entities"], r.text


def test_retention_states_the_repeat_window(client: TestClient, spec: dict[str, Any]) -> None:
    days = spec["components"]["schemas"]["RetentionPolicy"]["properties"]["diagnoses_days"]
    floor = next(b for b in days["anyOf"] if b.get("type") == "number")["minimum"]
    body = {"responses_days": None, "job_inputs_days": None}
    assert client.put("/v1/admin/retention", json={**body, "diagnoses_days": floor}).status_code == 200
    below = math.nextafter(floor, 0.0)
    assert not _validator(spec, "RetentionPolicy").is_valid({**body, "diagnoses_days": below})
    assert client.put("/v1/admin/retention", json={**body, "diagnoses_days": below}).status_code == 422


def test_a_budget_period_names_its_kind(client: TestClient, spec: dict[str, Any]) -> None:
    policy = {"cap_epsilon": 10.0, "default_mechanism": "laplace", "default_epsilon": 1.0, "sensitivity": "paper",
              "allow_unnoised": False, "warning_fraction": 0.2}
    for period, valid in (({"window_s": 600.0}, False), ({"kind": "rolling", "window_s": 600.0}, True)):
        assert _validator(spec, "PrivacyPolicy").is_valid({**policy, "period": period}) == valid
        r = client.put("/v1/admin/privacy-policy", json={**policy, "period": period})
        assert (r.status_code == 200) == valid, r.text


def test_a_server_that_forbids_unnoised_answers_says_so(tmp_path: Path) -> None:
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}, allow_unnoised=False) as strict:
        schema = strict.get("/openapi.json").json()["components"]["schemas"]["PrivacyPolicy"]
    assert schema["properties"]["allow_unnoised"]["const"] is False


def test_every_list_cursor_is_a_documented_opaque_token(spec: dict[str, Any]) -> None:
    lists = [path for path, item in spec["paths"].items()
             if any(p["name"] == "cursor" for p in item.get("get", {}).get("parameters", []))]
    assert len(lists) == 6, lists
    for path in lists:
        cursor = next(p for p in spec["paths"][path]["get"]["parameters"] if p["name"] == "cursor")
        string = cursor["schema"]["anyOf"][0]
        assert string["maxLength"] and re.compile(string["pattern"]), path
        assert "opaque" in cursor["description"], path
