"""``ObservedRequests`` (app/middleware.py): one middleware writes each request's access line and latency
observation. Every request is logged and counted once, one that fails inside the app too."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from app import middleware
from app.middleware import ObservedRequests
from tests.conftest import make_client
from tests.factories import FakeEntity


def _count(method: str, route: str, status: str) -> float:
    labels = {"method": method, "route": route, "status": status}
    return REGISTRY.get_sample_value("fedcd_http_request_duration_seconds_count", labels) or 0.0


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/speed-test/items/{item_id}")
    async def item(item_id: str) -> dict[str, str]:
        return {"id": item_id}

    @app.get("/speed-test/boom")
    async def boom() -> None:
        raise RuntimeError("failed inside the app")

    app.add_middleware(ObservedRequests)
    return app


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "fedcd.access"]


@pytest.mark.parametrize("cached_label_sets", [1024, 0])  # 0: past the cap every observation looks its child up
def test_each_request_is_logged_and_counted_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, cached_label_sets: int,
) -> None:
    monkeypatch.setattr(middleware, "_MAX_CACHED_LABELS", cached_label_sets)
    before = _count("GET", "/speed-test/items/{item_id}", "200")
    with caplog.at_level(logging.INFO, logger="fedcd.access"), TestClient(_app()) as client:
        for item_id in ("a", "b", "c"):
            assert client.get(f"/speed-test/items/{item_id}").status_code == 200
    assert _count("GET", "/speed-test/items/{item_id}", "200") == before + 3
    lines = _lines(caplog)
    assert len(lines) == 3
    assert all(line.startswith("GET /speed-test/items/{item_id} 200 ") for line in lines)  # the template, no raw id
    assert all(line.endswith("tenant=- key=-") for line in lines)


def test_an_error_inside_the_app_is_logged_and_counted_as_500(caplog: pytest.LogCaptureFixture) -> None:
    before = _count("GET", "/speed-test/boom", "500")
    with caplog.at_level(logging.INFO, logger="fedcd.access"), \
            TestClient(_app(), raise_server_exceptions=False) as client:
        assert client.get("/speed-test/boom").status_code == 500
    assert _count("GET", "/speed-test/boom", "500") == before + 1
    assert [line.split(" ")[:3] for line in _lines(caplog)] == [["GET", "/speed-test/boom", "500"]]


def test_an_unmatched_path_is_counted_under_its_placeholder(caplog: pytest.LogCaptureFixture) -> None:
    before = _count("GET", "<unmatched>", "404")
    with caplog.at_level(logging.INFO, logger="fedcd.access"), TestClient(_app()) as client:
        assert client.get("/speed-test/nowhere/42").status_code == 404
    assert _count("GET", "<unmatched>", "404") == before + 1
    assert [line.split(" ")[:3] for line in _lines(caplog)] == [["GET", "<unmatched>", "404"]]


def test_invented_methods_share_one_metric_series(caplog: pytest.LogCaptureFixture) -> None:
    """Any token is a valid HTTP method: one per request must not add a series each (no key needed to send one)."""
    route = "/speed-test/items/{item_id}"
    before, patched = _count("other", route, "405"), _count("PATCH", route, "405")
    with caplog.at_level(logging.INFO, logger="fedcd.access"), TestClient(_app()) as client:
        for method in ("FOO", "BAR1", "X-Y"):
            assert client.request(method, "/speed-test/items/a").status_code == 405
        assert client.request("PATCH", "/speed-test/items/a").status_code == 405  # a standard one keeps its name
    assert _count("other", route, "405") == before + 3
    assert all(_count(method, route, "405") == 0 for method in ("FOO", "BAR1", "X-Y"))
    assert _count("PATCH", route, "405") == patched + 1
    assert [line.split(" ")[0] for line in _lines(caplog)] == ["FOO", "BAR1", "X-Y", "PATCH"]  # the log says which


def test_a_diagnosis_through_the_gateway_is_logged_with_its_tenant_and_counted_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    body = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}
    before = _count("POST", "/v1/diagnose", "200")
    with caplog.at_level(logging.INFO, logger="fedcd.access"), \
            make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.2)}, tenant="acme") as client:
        assert client.post("/v1/diagnose", json=body).status_code == 200
    assert _count("POST", "/v1/diagnose", "200") == before + 1
    lines = [line for line in _lines(caplog) if line.startswith("POST /v1/diagnose ")]
    assert len(lines) == 1
    assert " tenant=acme key=" in lines[0] and "s1" not in lines[0]
