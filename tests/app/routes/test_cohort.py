"""Cohort analytics with central DP: noisy mean and histogram per concept, minimum size, ledger charges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privacy import cohort_statistics, make_rng
from tests.app.jobs.test_calibrate import biased
from tests.conftest import make_client
from tests.factories import FakeEntity

Q = "example-prealgebra"


def _students(n: int) -> list[dict]:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    return [
        {"student_id": f"c{s}", "responses": [{"item_id": i, "correct": bool((s >> k) & 1)} for k, i in enumerate(items)]}
        for s in range(n)
    ]


def test_statistics_are_unbiased_and_noise_matches_the_budget() -> None:
    # 200 students, all mastery 0.3 on one concept; ε = 2 over K = 1 → ε_stat = 1, Laplace scale 1.
    rows = [{"a": 0.3}] * 200
    means, counts = [], []
    for seed in range(400):
        stats, eps_stat = cohort_statistics(rows, ["a"], epsilon=2.0, bins=5, rng=make_rng(seed))
        means.append(stats["a"].mean)
        counts.append(stats["a"].counts[1])  # 0.3 falls in the second of five bins
    assert eps_stat == 1.0
    assert np.mean(means) == pytest.approx(0.3, abs=0.01)
    assert np.mean(counts) == pytest.approx(200, abs=0.3)
    assert np.std(counts) == pytest.approx(np.sqrt(2), rel=0.15)  # Laplace(1) has sd √2


def test_cohort_report_through_the_api_charges_every_student(tmp_path: Path) -> None:
    entities = {"good": FakeEntity("good", biased(0.0))}
    with make_client(tmp_path, entities, privacy_cap_epsilon=3.0, min_cohort_size=10) as client:
        r = client.post("/v1/cohort-report", json={"qmatrix_id": Q, "students": _students(40), "epsilon": 2.0, "bins": 4})
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["cohort_size"] == 40 and report["charged_epsilon_per_student"] == 2.0
        concept = report["concepts"]["Add and subtract fractions"]
        assert len(concept["histogram"]["counts"]) == 4 and 0.0 <= concept["mean"] <= 1.0
        assert client.get("/v1/privacy/students/c7").json()["spent_epsilon"] == 2.0
        # a second report would exceed the cap of 3: nothing released, nobody charged
        again = client.post("/v1/cohort-report", json={"qmatrix_id": Q, "students": _students(40), "epsilon": 2.0})
        assert again.status_code == 429
        assert client.get("/v1/privacy/students/c0").json()["spent_epsilon"] == 2.0


def test_small_or_duplicate_cohorts_are_refused(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/cohort-report", json={"qmatrix_id": Q, "students": _students(3), "epsilon": 1.0})
    assert r.status_code == 422 and "at least" in r.text
    dup = _students(12)
    dup[1]["student_id"] = dup[0]["student_id"]
    r = client.post("/v1/cohort-report", json={"qmatrix_id": Q, "students": dup, "epsilon": 1.0})
    assert r.status_code == 422 and "once" in r.text
    assert client.post("/v1/cohort-report", json={"qmatrix_id": Q, "students": _students(12), "epsilon": 0}).status_code == 422
