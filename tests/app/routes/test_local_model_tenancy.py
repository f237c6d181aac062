"""GET /v1/local-model is scoped to the caller's tenant (issue 30, finding 1).

A tenant sees its own models (by the Q-matrix id it registered) and the operator's shared ones; another tenant's
model is a plain 404, whether named by its registry key or left for the route to pick, and no error message lists
another tenant's name or Q-matrix ids. Models here are trained on SIMULATED students.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from federated import PublishOptions, TrainingConfig, train_federated
from federated.registry import model_key
from providers.local_fed import LocalFedEntity
from qmatrix import QMatrix, simulate_dina
from tests.conftest import auth_headers

BANK = QMatrix.from_matrix(id="geometry", concepts=["area", "angles"], item_ids=["g0", "g1", "g2", "g3"],
                           matrix=[[1, 0], [0, 1], [1, 1], [1, 0]])
SHARED = QMatrix.from_matrix(id="shared-bank", concepts=["x", "y"], item_ids=["o1", "o2", "o3"],
                             matrix=[[1, 0], [0, 1], [1, 1]])


def _publish(registry: Path, q: QMatrix, tenant: str | None) -> None:
    train_federated(dataset=simulate_dina(q, n_students=60, seed=3), registry=registry,  # SIMULATED students
                    config=TrainingConfig(rounds=1, seed=3), publish=PublishOptions(force=True), tenant=tenant)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("registry")
    _publish(folder, BANK, "school-b")  # school-b's own model of its 'geometry'
    return folder


def _client(tmp_path: Path, registry: Path) -> tuple[TestClient, dict[str, str], dict[str, str]]:
    entity = {"name": "local-fed", "kind": "local_fed", "model": "federated-cdm", "model_path": str(registry)}
    settings = Settings(state_dir=tmp_path, entities=[entity], preload_models=False,  # type: ignore[list-item]
                        default_calibration=False, train_default_model=False)
    app = create_app(settings)
    client = TestClient(app)
    return client, auth_headers(app, tenant="school-a", role="client"), auth_headers(app, tenant="school-b",
                                                                                     role="client")


def test_a_tenant_reads_its_own_model_by_its_own_id_and_no_other_tenant_does(tmp_path: Path, registry: Path) -> None:
    client, a, b = _client(tmp_path, registry)
    with client:
        own = client.get("/v1/local-model", headers=b, params={"qmatrix_id": "geometry"})
        assert own.status_code == 200, own.text
        assert own.json()["qmatrix_id"] == "geometry" and own.json()["owner"] == "tenant"
        assert client.get("/v1/local-model", headers=b).json()["version"] == own.json()["version"]  # the only one

        for params in ({"qmatrix_id": model_key("geometry", "school-b")}, {"qmatrix_id": "geometry"}, {}):
            r = client.get("/v1/local-model", headers=a, params=params)
            assert r.status_code == 404, (params, r.text)
            said = r.text.replace(str(params.get("qmatrix_id", "")), "<asked>")  # the caller's own words come back
            assert "school-b" not in said and str(registry) not in said and "version" not in r.json()


def test_several_visible_models_list_only_the_callers_ids(tmp_path: Path, registry: Path) -> None:
    folder = tmp_path / "registry"
    import shutil

    shutil.copytree(registry, folder)
    _publish(folder, SHARED, None)  # the operator's model: every tenant may read it
    _publish(folder, BANK, "school-c")
    client, a, b = _client(tmp_path / "state", folder)
    with client:
        # school-a sees only the operator's model: it is picked without naming it
        mine = client.get("/v1/local-model", headers=a)
        assert mine.status_code == 200 and mine.json()["qmatrix_id"] == "shared-bank", mine.text
        assert mine.json()["owner"] == "operator"
        # school-b sees two: the 422 names its own id and the shared one, never another tenant's
        r = client.get("/v1/local-model", headers=b)
        assert r.status_code == 422, r.text
        assert "geometry" in r.text and "shared-bank" in r.text and "school-c" not in r.text and "tenant:" not in r.text


def test_unknown_ids_are_not_cached(registry: Path) -> None:
    entity = LocalFedEntity(registry)
    for k in range(50):
        with pytest.raises(Exception, match="no local-fed model"):
            entity.info_for("school-a", f"probe-{k}")
        with pytest.raises(Exception):
            entity.model_for(f"probe-{k}")
    assert len(entity._models) <= 1  # only keys with a pointer file are ever cached
