"""The federated-trained model as entity `local-fed` through the API."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from tests.conftest import auth_headers
from federated import default_model_if_missing


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("registry")
    assert default_model_if_missing(folder, threads=1) is not None
    return folder


def _client(tmp_path: Path, registry: Path) -> TestClient:
    entity = {"name": "local-fed", "kind": "local_fed", "model": "federated-cdm", "model_path": str(registry)}
    settings = Settings(state_dir=tmp_path, entities=[entity], preload_models=True, default_calibration=False, privacy_cap_epsilon=1e6)  # type: ignore[list-item]
    app = create_app(settings)
    return TestClient(app, headers=auth_headers(app))


def test_local_fed_answers_diagnose(tmp_path: Path, registry: Path) -> None:
    body = {"student_id": "s", "qmatrix_id": "example-prealgebra", "epsilon": 2.0, "include_entities": True,
            "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": False}]}
    with _client(tmp_path, registry) as client:
        r = client.post("/v1/diagnose", json=body)
        assert r.status_code == 200, r.text
        entity = r.json()["entities"][0]
        assert entity["name"] == "local-fed" and entity["status"] == "ok"
        assert client.get("/v1/entities").json()["data"][0]["status"] == "ready"


def test_local_model_endpoint_shows_the_signed_version(tmp_path: Path, registry: Path) -> None:
    with _client(tmp_path, registry) as client:
        info = client.get("/v1/local-model").json()
    assert info["version"] == "v0001" and info["signature_verified"] is True
    assert set(info) >= {"version", "signature_verified", "rounds", "epsilon", "delta", "dp_mode", "heldout_metrics", "trained_at", "config"}
    assert info["heldout_metrics"]["auc"] > 0.6


def test_no_local_model_is_404(client: TestClient) -> None:
    assert client.get("/v1/local-model").status_code == 404


def test_first_start_trains_the_default_model_once(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, entities=None, default_calibration=False, preload_models=False)
    from app.bootstrap import train_default_model
    import asyncio

    asyncio.run(train_default_model(settings))
    assert (tmp_path / "models" / "active.json").is_file()
    assert "local-fed" in [s.name for s in settings.entity_specs]
