"""A new tenant's own Q-matrix, before anything is trained or calibrated (issue 21, "honest cold start").

Measured before: a 3-concept geometry Q-matrix, a student with two of four items wrong, answered 1.0 for every
concept with no interval and no word on what it rested on (local-fed skipped: no model for the Q-matrix; the
embedded LLMs answer ≈ 1.0). Now the untrained evidence model answers every Q-matrix, the uncalibrated federation
aggregates as a posterior with an interval for every concept, and ``basis`` says what the diagnosis rests on.
"""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from app import Settings, create_app
from tests.conftest import auth_headers

GEOMETRY = {
    "id": "geometry", "concepts": ["Area of rectangles", "Pythagorean theorem", "Angles in triangles"],
    "items": [
        {"id": "g1", "text": "Area of a 3 by 4 rectangle?", "concepts": ["Area of rectangles"]},
        {"id": "g2", "text": "Hypotenuse of legs 3 and 4?", "concepts": ["Pythagorean theorem"]},
        {"id": "g3", "text": "Third angle of a triangle with 50 and 60?", "concepts": ["Angles in triangles"]},
        {"id": "g4", "text": "A right triangle's missing angle and side", "concepts": ["Pythagorean theorem", "Angles in triangles"]},
    ],
}
# Two of four wrong: Pythagorean theorem is never answered right.
RESPONSES = [{"item_id": "g1", "correct": True}, {"item_id": "g2", "correct": False},
             {"item_id": "g3", "correct": True}, {"item_id": "g4", "correct": False}]


def _client(tmp_path: Path) -> TestClient:
    entities = [
        {"name": "local-fed", "kind": "local_fed", "model": "federated-cdm", "model_path": str(tmp_path / "registry")},
        # A SIMULATED stand-in for the embedded LLMs: confident and skill-less, it answers ≈ 1.0 whatever happened.
        {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"},
    ]
    settings = Settings(state_dir=tmp_path / "state", entities=entities, preload_models=False,  # type: ignore[arg-type]
                        default_calibration=False, train_default_model=False, privacy_cap_epsilon=1e6,
                        allow_unnoised=True)  # a calibration of real records here asks for "epsilon": "none"
    app = create_app(settings)
    return TestClient(app, headers=auth_headers(app, tenant="new-platform"))


def test_a_new_qmatrix_is_diagnosed_at_once_with_intervals_and_a_basis(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        assert client.post("/v1/qmatrices", json=GEOMETRY).status_code == 201
        r = client.post("/v1/diagnose", json={"student_id": "s1", "qmatrix_id": "geometry", "responses": RESPONSES,
                                              "include_entities": True})
    assert r.status_code == 200, r.text
    body = r.json()
    concepts = set(GEOMETRY["concepts"])
    # Every concept has a posterior interval; the aggregation is not a bare mean
    assert body["aggregation"] == "posterior" and set(body["mastery_interval"]) == concepts
    assert all(lo <= body["mastery"][c] <= hi for c, (lo, hi) in body["mastery_interval"].items())
    # local-fed answered with the untrained evidence model, reading the evidence: the never-right concept is lowest
    local = next(e for e in body["entities"] if e["name"] == "local-fed")
    assert local["status"] == "ok" and local["model"] == "fedcd-cdm/untrained"
    assert min(local["mastery"], key=local["mastery"].get) == "Pythagorean theorem"
    assert local["mastery"]["Pythagorean theorem"] < 0.5 < local["mastery"]["Area of rectangles"]
    # ... and the answer says what it rests on
    basis = body["basis"]
    assert basis["calibration"] == "uncalibrated" and basis["calibration_students"] == 0
    assert basis["local_model"] == "untrained" and basis["local_model_version"] is None
    assert "untrained evidence model" in basis["summary"] and "uncalibrated" in basis["summary"]


def test_the_basis_names_a_calibration_and_its_students(tmp_path: Path) -> None:
    records = [{"student_id": f"v{s}", "responses": [{"item_id": i, "correct": bool((s >> k) & 1)}
                                                     for k, i in enumerate(["q01", "q02", "q03", "q04", "q05"])]}
               for s in range(24)]
    with _client(tmp_path) as client:
        job = client.post("/v1/calibrate", json={"qmatrix_id": "example-prealgebra", "records": records,
                                                 "epsilon": "none", "method": "bias"}).json()
        for _ in range(2000):  # bounded: polls, not a time limit asserted
            status = client.get(f"/v1/calibrate/{job['job_id']}").json()
            if status["status"] in ("succeeded", "failed"):
                break
            time.sleep(0.02)
        assert status["status"] == "succeeded", status
        r = client.post("/v1/diagnose", json={"student_id": "s1", "qmatrix_id": "example-prealgebra",
                                              "responses": [{"item_id": "q01", "correct": True}]})
    assert r.status_code == 200, r.text
    basis = r.json()["basis"]
    assert basis["calibration"] == "calibrated" and basis["calibration_id"] == status["calibration_id"]
    assert basis["calibration_students"] == 24 and basis["calibration_truth"] == "proportion-correct"
    assert "calibrated on 24 students" in basis["summary"]
