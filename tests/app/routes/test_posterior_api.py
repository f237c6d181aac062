"""Bayes post-processing through the API: intervals, and a posterior calibration used automatically."""

from __future__ import annotations

import time
from pathlib import Path

from tests.app.jobs.test_calibrate import Q_ID, _records, _wait, biased
from tests.conftest import make_client
from tests.factories import FakeEntity

BODY = {
    "student_id": "s1",
    "qmatrix_id": Q_ID,
    "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": False}],
    "epsilon": 2.0,
}


def test_posterior_aggregation_returns_credible_intervals(tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    with make_client(tmp_path, fakes) as client:
        r = client.post("/v1/diagnose", json={**BODY, "aggregation": "posterior"})
        assert r.status_code == 200, r.text
        body = r.json()
    assert body["aggregation"] == "posterior" and body["interval_level"] == 0.9
    for concept, value in body["mastery"].items():
        low, high = body["mastery_interval"][concept]
        assert 0.0 <= low <= value <= high <= 1.0
    # the paper's Laplace at ε = 2 over K = 6 concepts is noisy: intervals are wide
    assert all(high - low > 0.3 for low, high in body["mastery_interval"].values())


def test_mean_aggregation_has_no_intervals(client) -> None:  # type: ignore[no-untyped-def]
    body = client.post("/v1/diagnose", json={**BODY, "aggregation": "mean"}).json()
    assert body["aggregation"] == "mean" and body["mastery_interval"] is None


def test_posterior_calibration_is_fitted_on_clean_answers_and_used_automatically(tmp_path: Path) -> None:
    entities = {"good": FakeEntity("good", biased(0.0)), "off": FakeEntity("off", biased(0.3))}
    with make_client(tmp_path, entities) as client:
        job = _wait(client, client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(30), "method": "posterior", "epsilon": 2.0}).json()["job_id"])
        assert job["status"] == "succeeded", job
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        # the record keeps the noise diagnoses will use (the server's default mechanism at the requested ε) ...
        assert record["method"] == "posterior" and record["epsilon"] == 2.0 and record["mechanism"] == "anchored_piecewise"
        # ... while τ is fitted on the clean answers (the off entity is 0.3 off, with no noise in between)
        params = record["params"]
        assert params["entity_error_sd"]["good"] < 0.05 < 0.2 < params["entity_error_sd"]["off"]
        assert set(params["priors"]) <= {"Add and subtract fractions", "Multiply and divide fractions", "Integer arithmetic with negatives",
                                          "Order of operations", "Solve one-step linear equations", "Solve two-step linear equations"}
        time.sleep(0.01)
        body = client.post("/v1/diagnose", json=BODY).json()
        assert body["aggregation"] == "posterior" and body["calibration_id"] == record["id"]
        assert body["mastery_interval"] is not None and body["calibration_mismatch"] is None
        other = client.post("/v1/diagnose", json={**BODY, "student_id": "s3", "mechanism": "laplace", "epsilon": 4.0}).json()
        assert other["calibration_mismatch"] == {
            "mechanism": {"calibrated": "anchored_piecewise", "served": "laplace"}, "epsilon": {"calibrated": 2.0, "served": 4.0}
        }
        plain = client.post("/v1/diagnose", json={**BODY, "aggregation": "mean", "student_id": "s2"}).json()
        assert plain["aggregation"] == "mean" and plain["calibration_id"] is None
