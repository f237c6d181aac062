"""Per-tenant privacy policies: versioned, admin-only, in force from the next request."""

from __future__ import annotations

import pytest

from pathlib import Path

from fastapi.testclient import TestClient

from tests.conftest import bearer, make_client
from tests.factories import FakeEntity

# Every test here runs on both engines (SQLite and PostgreSQL).
pytestmark = pytest.mark.usefixtures("both_engines")

Q = "example-prealgebra"


def _body(n: int, student: str = "s1", **extra: object) -> dict:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    return {"student_id": student, "qmatrix_id": Q, **extra,
            "responses": [{"item_id": i, "correct": bool((n >> k) & 1)} for k, i in enumerate(items)]}


def _policy(**overrides: object) -> dict:
    return {"period": {"kind": "lifetime"}, "cap_epsilon": 100.0, "cap_delta": 1e-4, "default_mechanism": "laplace",
            "default_epsilon": 1.0, "sensitivity": "assessed", "allow_unnoised": False, "warning_fraction": 0.2,
            **overrides}


def _client(tmp_path: Path) -> TestClient:
    return make_client(tmp_path, {"a": FakeEntity("a", 0.4)}, allow_unnoised=False)


def test_the_default_policy_is_version_0_and_admins_only(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        policy = client.get("/v1/admin/privacy-policy").json()
        assert policy["version"] == 0 and policy["created_by"] is None
        assert policy["period"] == {"kind": "rolling", "window_s": 86400.0}
        viewer = bearer(client, tenant="default", role="client")
        assert client.get("/v1/admin/privacy-policy", headers=viewer).status_code == 403
        assert client.put("/v1/admin/privacy-policy", json=_policy(), headers=viewer).status_code == 403


def test_a_change_is_versioned_recorded_and_in_force_on_the_next_request(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        r = client.put("/v1/admin/privacy-policy", json=_policy(cap_epsilon=2.0))
        assert r.status_code == 200 and r.json()["version"] == 1 and r.json()["created_by"]
        assert client.post("/v1/diagnose", json=_body(1, epsilon=2.0)).status_code == 200
        refused = client.post("/v1/diagnose", json=_body(2, epsilon=2.0))
        assert refused.status_code == 429 and "does not renew" in refused.json()["detail"]
        client.put("/v1/admin/privacy-policy", json=_policy(cap_epsilon=10.0))
        assert client.post("/v1/diagnose", json=_body(2, epsilon=2.0)).status_code == 200  # next request: new cap
        history = client.get("/v1/admin/privacy-policy/history").json()
        assert [p["version"] for p in history["data"]] == [1, 2] and history["data"][0]["cap_epsilon"] == 2.0


def test_policy_defaults_and_unnoised_answers_are_per_tenant(tmp_path: Path) -> None:
    # A server that allows unnoised answers (FEDCD_ALLOW_UNNOISED=true) but whose default policy refuses them
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}, allow_unnoised=True) as client:
        b_admin = bearer(client, tenant="school-b", role="admin")
        server_default = client.get("/v1/admin/privacy-policy", headers=b_admin).json()
        b_policy = {**{k: server_default[k] for k in _policy()}, "allow_unnoised": False}
        assert client.put("/v1/admin/privacy-policy", json=b_policy, headers=b_admin).status_code == 200
        client.put("/v1/admin/privacy-policy", json=_policy(default_epsilon=4.0, allow_unnoised=True))
        mine = client.post("/v1/diagnose", json=_body(1)).json()
        assert mine["privacy"]["epsilon"] == 4.0 and mine["privacy"]["mechanism"] == "laplace"
        assert client.post("/v1/diagnose", json=_body(1, epsilon="none")).status_code == 200
        # tenant B keeps its own policy: the server's default diagnosis settings, no unnoised answers
        theirs = client.post("/v1/diagnose", json=_body(1), headers=b_admin).json()
        assert theirs["privacy"]["epsilon"] == 32.0 and theirs["privacy"]["mechanism"] == "anchored_piecewise"
        assert client.post("/v1/diagnose", json=_body(1, epsilon="none"), headers=b_admin).status_code == 422
        assert client.get("/v1/admin/privacy-policy", headers=b_admin).json()["version"] == 1


def test_a_tenant_cannot_allow_unnoised_answers_the_server_forbids(tmp_path: Path) -> None:
    # Prepare: FEDCD_ALLOW_UNNOISED=false (the default)
    with _client(tmp_path) as client:
        # Execute
        r = client.put("/v1/admin/privacy-policy", json=_policy(allow_unnoised=True))

        # Assert: refused, naming the field and why; nothing stored; raw answers still refused
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]
        assert error["loc"] == ["body", "allow_unnoised"] and "server forbids" in error["msg"]
        assert "FEDCD_ALLOW_UNNOISED=false" in error["msg"]
        policy = client.get("/v1/admin/privacy-policy").json()
        assert policy["version"] == 0 and policy["allow_unnoised"] is False
        assert client.get("/v1/admin/privacy-policy/history").json()["count"] == 0
        assert client.post("/v1/diagnose", json=_body(1, epsilon="none")).status_code == 422
        # ... and the same policy without unnoised answers is accepted
        assert client.put("/v1/admin/privacy-policy", json=_policy(allow_unnoised=False)).status_code == 200


def test_a_stored_policy_allowing_unnoised_answers_is_not_honoured_once_the_server_forbids_them(
        tmp_path: Path) -> None:
    # Prepare: a tenant allowed unnoised answers while the server allowed them ...
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}, allow_unnoised=True) as client:
        assert client.put("/v1/admin/privacy-policy", json=_policy(allow_unnoised=True)).status_code == 200
        assert client.post("/v1/diagnose", json=_body(1, epsilon="none")).status_code == 200

    # Execute: ... then the operator restarts the server with FEDCD_ALLOW_UNNOISED=false, same database
    with _client(tmp_path) as client:
        policy = client.get("/v1/admin/privacy-policy").json()
        refused = client.post("/v1/diagnose", json=_body(2, epsilon="none"))
        noised = client.post("/v1/diagnose", json=_body(2))

    # Assert: the policy in force is capped by the server's setting; raw answers are refused, noised ones served
    assert policy["version"] == 1 and policy["allow_unnoised"] is False
    assert refused.status_code == 422 and "allow_unnoised" in refused.text
    assert noised.status_code == 200


def test_a_day_policy_says_when_it_renews_and_warns_before_refusing(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        client.put("/v1/admin/privacy-policy", json=_policy(
            period={"kind": "day", "timezone": "Europe/Paris"}, cap_epsilon=5.0, warning_fraction=0.5))
        first = client.post("/v1/diagnose", json=_body(1, epsilon=2.0)).json()["budget"]
        assert first["period"] == "day (Europe/Paris)" and first["renews_at"].endswith(":00:00Z")
        assert first["budget_warning"] is None and first["remaining_epsilon"] == 3.0
        second = client.post("/v1/diagnose", json=_body(2, epsilon=2.0)).json()["budget"]
        assert second["budget_warning"] and "renews at" in second["budget_warning"]
        refused = client.post("/v1/diagnose", json=_body(3, epsilon=2.0))
        assert refused.status_code == 429 and f"renews at {first['renews_at']}" in refused.json()["detail"]
        status = client.post("/v1/privacy/lookup", json={"student_id": "s1"}).json()
        assert status["renews_at"] == first["renews_at"] and status["lifetime_epsilon"] == 4.0


def test_invalid_policies_are_422_naming_the_field(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        for bad, field in [
            (_policy(period={"kind": "rolling", "window_s": 1}), "window_s"),
            (_policy(period={"kind": "day", "timezone": "Mars/Olympus"}), "period"),
            (_policy(period={"kind": "term", "terms": [{"start": "2026-09-01", "end": "2026-08-01"}]}), "period"),
            (_policy(cap_epsilon=0), "cap_epsilon"),
            (_policy(default_mechanism="magic"), "default_mechanism"),
            (_policy(period={"kind": "fortnight"}), "period"),
        ]:
            r = client.put("/v1/admin/privacy-policy", json=bad)
            assert r.status_code == 422 and field in r.text, (bad, r.text)
