"""The federated-trained models (one per Q-matrix) as entity `local-fed` through the API."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from federated import ModelRegistry, TrainingConfig, default_model_if_missing, train_federated
from qmatrix import QMatrix, simulate_dina
from tests.conftest import auth_headers

SIM = {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident", "seed": 1}
OTHER = QMatrix.from_matrix(id="other-q", concepts=["x", "y"], item_ids=["o1", "o2", "o3"],
                            matrix=[[1, 0], [0, 1], [1, 1]])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("registry")
    assert default_model_if_missing(folder, threads=1) is not None
    return folder


def _client(tmp_path: Path, registry: Path, *extra: dict[str, object]) -> TestClient:
    entity = {"name": "local-fed", "kind": "local_fed", "model": "federated-cdm", "model_path": str(registry)}
    settings = Settings(state_dir=tmp_path, entities=[entity, *extra], preload_models=True, default_calibration=False, privacy_cap_epsilon=1e6)  # type: ignore[list-item]
    app = create_app(settings)
    return TestClient(app, headers=auth_headers(app))


def _body(qmatrix_id: str, items: tuple[str, ...], student: str = "s") -> dict[str, object]:
    return {"student_id": student, "qmatrix_id": qmatrix_id, "epsilon": 2.0, "include_entities": True,
            "responses": [{"item_id": i, "correct": k % 2 == 0} for k, i in enumerate(items)]}


def test_local_fed_answers_diagnose(tmp_path: Path, registry: Path) -> None:
    with _client(tmp_path, registry) as client:
        r = client.post("/v1/diagnose", json=_body("example-prealgebra", ("q01", "q10")))
        assert r.status_code == 200, r.text
        entity = r.json()["entities"][0]
        assert entity["name"] == "local-fed" and entity["status"] == "ok" and entity["model"] == "fedcd-cdm/v0001"
        assert r.json()["skipped_entities"] == []
        assert client.get("/v1/entities").json()["data"][0]["status"] == "ready"


def test_local_model_endpoint_shows_the_signed_version(tmp_path: Path, registry: Path) -> None:
    with _client(tmp_path, registry) as client:
        info = client.get("/v1/local-model").json()
        assert client.get("/v1/local-model", params={"qmatrix_id": "example-prealgebra"}).json() == info
    assert info["version"] == "v0001" and info["signature_verified"] is True
    assert info["qmatrix_id"] == "example-prealgebra" and info["gate"]["accepted"] is True
    assert set(info) >= {"version", "signature_verified", "rounds", "epsilon", "delta", "dp_mode", "nodes", "gate",
                         "heldout_metrics", "trained_at", "config"}
    assert info["heldout_metrics"]["auc"] > 0.6
    # the first-start default is local-fed v2, with the item bank it learned parameters for
    assert info["config"]["model"]["kind"] == "higher-order-irt" and "q01" in info["config"]["model"]["items"]
    assert info["scale_pinned"] is True  # trained since the scale was pinned (docs/mastery.md)


def test_a_qmatrix_without_a_model_is_served_by_the_untrained_evidence_model(tmp_path: Path, registry: Path) -> None:
    # Prepare: local-fed has no trained model for this Q-matrix; a second entity answers too.
    with _client(tmp_path, registry, SIM) as client:
        assert client.post("/v1/qmatrices", json={
            "id": OTHER.id, "concepts": list(OTHER.concepts),
            "items": [{"id": i.id, "text": None, "concepts": list(i.concepts)} for i in OTHER.items]}).status_code == 201

        # Execute
        r = client.post("/v1/diagnose", json=_body(OTHER.id, ("o1", "o2", "o3")))
        missing = client.get("/v1/local-model", params={"qmatrix_id": OTHER.id})

    # Assert
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["failed_entities"] == [] and body["skipped_entities"] == []
    local = next(e for e in body["entities"] if e["name"] == "local-fed")
    assert local["status"] == "ok" and local["model"] == "fedcd-cdm/untrained" and set(local["mastery"]) == set(body["mastery"])
    assert body["budget"]["charged_epsilon"] == pytest.approx(4.0)  # ε = 2 for each of the two entities that answered
    assert missing.status_code == 404 and missing.json()["detail"][0]["loc"] == ["query", "qmatrix_id"]


def test_only_local_fed_and_no_model_still_answers_from_the_evidence(tmp_path: Path) -> None:
    with _client(tmp_path, tmp_path / "empty-registry") as client:
        r = client.post("/v1/diagnose", json=_body("example-prealgebra", ("q01",)))
    assert r.status_code == 200, r.text
    assert r.json()["entities"][0]["model"] == "fedcd-cdm/untrained"


def test_a_model_published_while_serving_is_picked_up_and_described(tmp_path: Path, registry: Path) -> None:
    # Prepare: the gateway serves a copy of the registry; the other Q-matrix has no model yet.
    folder = tmp_path / "registry"
    shutil.copytree(registry, folder)
    with _client(tmp_path / "state", folder, SIM) as client:
        client.post("/v1/qmatrices", json={"id": OTHER.id, "concepts": list(OTHER.concepts), "items": [
            {"id": i.id, "text": None, "concepts": list(i.concepts)} for i in OTHER.items]})
        before = client.post("/v1/diagnose", json=_body(OTHER.id, ("o1", "o3"))).json()

        # Execute: publish a model for it from outside the gateway (as a coordinator would)
        train_federated(dataset=simulate_dina(OTHER, n_students=120, seed=2), registry=folder,
                        config=TrainingConfig(rounds=2, seed=2))
        after = client.post("/v1/diagnose", json=_body(OTHER.id, ("o1", "o3"), student="t")).json()  # no repeat
        several = client.get("/v1/local-model")
        described = client.get("/v1/local-model", params={"qmatrix_id": OTHER.id}).json()

    # Assert
    assert next(e for e in before["entities"] if e["name"] == "local-fed")["model"] == "fedcd-cdm/untrained"
    local = next(e for e in after["entities"] if e["name"] == "local-fed")
    assert after["skipped_entities"] == [] and local["status"] == "ok" and local["model"] == "fedcd-cdm/v0002"
    assert several.status_code == 422 and "name one" in several.json()["detail"][0]["msg"]
    assert described["version"] == "v0002" and described["qmatrix_id"] == OTHER.id
    assert ModelRegistry(folder).active_versions() == {"example-prealgebra": "v0001", OTHER.id: "v0002"}


def test_no_local_model_is_404(client: TestClient) -> None:
    assert client.get("/v1/local-model").status_code == 404


def test_first_start_trains_the_default_model_once(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, entities=None, default_calibration=False, preload_models=False)
    from app.bootstrap import train_default_model
    import asyncio

    asyncio.run(train_default_model(settings))
    assert ModelRegistry(tmp_path / "models").active_version("example-prealgebra") == "v0001"
    asyncio.run(train_default_model(settings))
    assert ModelRegistry(tmp_path / "models").versions() == ["v0001"]
    assert "local-fed" in [s.name for s in settings.entity_specs]
