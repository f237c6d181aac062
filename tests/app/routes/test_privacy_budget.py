"""The per-student privacy budget through the API: charge, refuse with 429, repeat rule, tenants, refunds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from app import Settings, create_app
from tests.conftest import auth_headers
from providers import EntityRejected
from tests.conftest import bearer, make_client
from tests.factories import FakeEntity

# Every test here runs on both engines (SQLite and PostgreSQL).
pytestmark = pytest.mark.usefixtures("both_engines")

Q = "example-prealgebra"


def _body(n: int = 0, student: str = "s1", epsilon: float = 1.0) -> dict:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    responses = [{"item_id": i, "correct": bool((n >> k) & 1)} for k, i in enumerate(items)]
    return {"student_id": student, "qmatrix_id": Q, "responses": responses, "epsilon": epsilon}


def test_each_answer_spends_epsilon_per_entity_until_the_cap(tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    # Two entities at ε = 1 cost 2 per request; a cap of 5 allows two requests.
    with make_client(tmp_path, fakes, privacy_cap_epsilon=5.0, privacy_period="lifetime") as client:
        first = client.post("/v1/diagnose", json=_body(1))
        assert first.status_code == 200
        assert first.json()["budget"] == {
            "tenant": "default", "charged_epsilon": 2.0, "period": "lifetime", "spent_epsilon": 2.0,
            "remaining_epsilon": 3.0, "cap_epsilon": 5.0, "renews_at": None, "lifetime_epsilon": 2.0,
            "budget_warning": None, "repeat": False,
        }
        assert client.post("/v1/diagnose", json=_body(2)).status_code == 200
        refused = client.post("/v1/diagnose", json=_body(3))
        assert refused.status_code == 429
        assert "budget" in refused.json()["detail"] and "spent" in refused.json()["detail"]
        status = client.get("/v1/privacy/students/s1").json()
        assert status["spent_epsilon"] == 4.0 and status["remaining_epsilon"] == 1.0 and status["queries"] == 2


def test_an_identical_request_in_the_window_gets_the_same_answer_for_free(tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    with make_client(tmp_path, fakes, privacy_cap_epsilon=100.0) as client:
        a = client.post("/v1/diagnose", json=_body(5)).json()
        b = client.post("/v1/diagnose", json=_body(5)).json()
        assert b["mastery"] == a["mastery"] and b["request_id"] == a["request_id"]
        assert b["budget"]["repeat"] is True and b["budget"]["charged_epsilon"] == 0.0
        assert client.get("/v1/privacy/students/s1").json()["spent_epsilon"] == 2.0
    with make_client(tmp_path, fakes, privacy_cap_epsilon=100.0, privacy_repeat_window_s=0.0) as client:
        c = client.post("/v1/diagnose", json=_body(5)).json()
        assert c["budget"]["repeat"] is False  # outside the window: a new query with fresh noise, charged


def test_tenants_come_from_keys_and_no_header_resets_a_budget(tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    with make_client(tmp_path, fakes, privacy_cap_epsilon=2.0) as client:
        school_a = bearer(client, tenant="school-a")
        school_b = bearer(client, tenant="school-b")
        assert client.post("/v1/diagnose", json=_body(1), headers=school_a).status_code == 200
        # The old tenant header (or any other) changes nothing: the key's tenant pays.
        for header in ({"X-Tenant-ID": "school-b"}, {"X-Tenant-ID": "fresh"}, {"X-Tenant": "x"}):
            r = client.post("/v1/diagnose", json=_body(2), headers={**school_a, **header})
            assert r.status_code == 429, r.text
            assert "s1" not in r.json()["detail"]  # the refusal names no student
        # Tenant B's student s1 is another person: its own budget, and B cannot see A's ledger.
        assert client.post("/v1/diagnose", json=_body(2), headers=school_b).status_code == 200
        assert client.get("/v1/privacy/students/s1", headers=school_b).json()["spent_epsilon"] == 2.0
        a = client.post("/v1/privacy/lookup", json={"student_id": "s1"}, headers=school_a).json()
        assert a["tenant"] == "school-a" and a["spent_epsilon"] == 2.0 and a["queries"] == 1


def test_nothing_is_spent_when_every_entity_failed(tmp_path: Path) -> None:
    broken = {"a": FakeEntity("a", error=EntityRejected("HTTP 401"))}
    with make_client(tmp_path, broken, privacy_cap_epsilon=5.0) as client:
        assert client.post("/v1/diagnose", json=_body(1)).status_code == 503
        assert client.get("/v1/privacy/students/s1").json()["spent_epsilon"] == 0.0


def test_unnoised_requests_are_refused_unless_allowed(tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    with make_client(tmp_path, fakes, allow_unnoised=False) as client:
        r = client.post("/v1/diagnose", json={**_body(1), "epsilon": "none"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "epsilon"]


def test_gaussian_queries_spend_delta_too(tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    with make_client(tmp_path, fakes, privacy_cap_epsilon=100.0, privacy_cap_delta=1e-3) as client:
        r = client.post("/v1/diagnose", json={**_body(1), "mechanism": "gaussian", "delta": 1e-5})
        assert r.status_code == 200, r.text
        assert client.get("/v1/privacy/students/s1").json()["spent_delta"] == pytest.approx(2e-5)


async def test_concurrent_requests_never_overspend(tmp_path: Path) -> None:
    # Cap 5 with one entity at ε = 1: of 200 concurrent distinct requests exactly 5 are served.
    settings = Settings(
        state_dir=tmp_path, entities=[], preload_models=False, default_calibration=False, privacy_cap_epsilon=5.0,
        batch_concurrency=8,
    )
    app = create_app(settings, entities={"a": FakeEntity("a", 0.5, delay_s=0.001)})
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=auth_headers(app)) as client:
            replies = await asyncio.gather(*(client.post("/v1/diagnose", json=_body(n)) for n in range(200)))
            status = (await client.get("/v1/privacy/students/s1")).json()
    codes = [r.status_code for r in replies]
    assert codes.count(200) == 5 and codes.count(429) == 195
    assert status["spent_epsilon"] == 5.0 and status["queries"] == 5
