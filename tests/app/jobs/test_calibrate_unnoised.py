"""A calibration on real students (``records``) is never answered or released unnoised unless the tenant's privacy
policy allows unnoised answers (``allow_unnoised``): unnoised, the fit would be neither protected nor charged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.conftest import make_client
from tests.app.jobs.test_calibrate import Q_ID, _records, _wait, biased
from tests.factories import FakeEntity

ENTITIES = {"over": FakeEntity("over", biased(0.2))}


@pytest.mark.parametrize(("overrides", "field"), [
    ({"release_epsilon": "none"}, "release_epsilon"),
    ({"epsilon": "none", "release_epsilon": 4.0}, "epsilon"),
    ({"epsilon": 1.0, "release_epsilon": "none"}, "release_epsilon"),
])
def test_real_students_unnoised_are_refused_naming_the_field(tmp_path: Path, overrides: dict, field: str) -> None:
    with make_client(tmp_path, ENTITIES, allow_unnoised=False, calibration_release_epsilon=4.0) as client:
        body = {"qmatrix_id": Q_ID, "records": _records(12), "method": "bias", **overrides}
        r = client.post("/v1/calibrate", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", field]
        assert "allow_unnoised" in r.json()["detail"][0]["msg"]
        assert client.get("/v1/jobs").json()["data"] == []  # refused before any job (or charge)
        assert client.get("/v1/privacy/students/v3").json()["spent_epsilon"] == 0.0


def test_a_tenant_policy_refusing_unnoised_is_obeyed_on_a_permissive_server(tmp_path: Path) -> None:
    with make_client(tmp_path, ENTITIES, allow_unnoised=True) as client:
        policy = client.get("/v1/admin/privacy-policy").json()
        keep = {k: policy[k] for k in ("period", "cap_epsilon", "cap_delta", "default_mechanism", "default_epsilon",
                                       "sensitivity", "warning_fraction")}
        assert client.put("/v1/admin/privacy-policy", json={**keep, "allow_unnoised": False}).status_code == 200
        body = {"qmatrix_id": Q_ID, "records": _records(12), "epsilon": "none", "release_epsilon": "none"}
        r = client.post("/v1/calibrate", json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "epsilon"]


def test_allowed_by_the_policy_or_on_simulated_students(tmp_path: Path) -> None:
    with make_client(tmp_path, ENTITIES, allow_unnoised=True) as client:
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "bias",
                "release_epsilon": "none"}
        r = client.post("/v1/calibrate", json=body)
        assert r.status_code == 202, r.text
        assert _wait(client, r.json()["job_id"])["status"] == "succeeded"
    with make_client(tmp_path / "sim", ENTITIES, allow_unnoised=False) as client:
        synthetic = {"qmatrix_id": Q_ID, "dataset": {"name": "synthetic", "part": "validation", "max_students": 20},
                     "method": "bias", "release_epsilon": "none"}
        assert client.post("/v1/calibrate", json=synthetic).status_code == 202  # SIMULATED: nobody to protect
