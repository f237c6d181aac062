"""Issue 21, part 4: the ``synthetic`` dataset calibrates any Q-matrix of the tenant before real data exists, on
SIMULATED students with known mastery, labelled so everywhere."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.app.conftest import make_client
from tests.app.jobs.test_calibrate import _wait, biased
from tests.conftest import bearer
from tests.factories import FakeEntity

CONCEPTS = ["Area of rectangles", "Pythagorean theorem", "Angles in triangles"]
GEOMETRY = {
    "id": "geometry",
    "concepts": CONCEPTS,
    "items": [
        {"id": "g1", "text": "Area of a 3 by 4 rectangle", "concepts": ["Area of rectangles"]},
        {"id": "g2", "text": "Hypotenuse of a 3-4 right triangle", "concepts": ["Pythagorean theorem"]},
        {"id": "g3", "text": "Third angle of a triangle with 50 and 60", "concepts": ["Angles in triangles"]},
        {"id": "g4", "text": "Area of a rectangle with diagonal 5 and side 3",
         "concepts": ["Area of rectangles", "Pythagorean theorem"]},
        {"id": "g5", "text": "Angles of an isosceles right triangle", "concepts": ["Angles in triangles", "Pythagorean theorem"]},
        {"id": "g6", "text": "Perimeter-free area of a 2 by 7 rectangle", "concepts": ["Area of rectangles"]},
    ],
}


def _entities() -> dict[str, FakeEntity]:
    """SIMULATED entities: 'over' reports the proportion correct plus 0.3, 'exact' the proportion correct."""
    return {"over": FakeEntity("over", biased(0.3)), "exact": FakeEntity("exact", biased(0.0))}


def _calibrate(client: TestClient, **body: object) -> dict:
    r = client.post("/v1/calibrate", json={"qmatrix_id": "geometry", "epsilon": "none", "method": "bias", **body})
    assert r.status_code == 202, r.text
    return _wait(client, r.json()["job_id"])


def test_synthetic_calibrates_the_tenants_own_qmatrix_and_a_diagnosis_uses_it(tmp_path: Path) -> None:
    entities = _entities()
    with make_client(tmp_path, entities, tenant="school") as client:
        assert client.post("/v1/qmatrices", json=GEOMETRY).status_code == 201
        # Execute: 100 SIMULATED students on the tenant's geometry Q-matrix; the validation fifth is fitted on.
        job = _calibrate(client, dataset={"name": "synthetic", "max_students": 100, "seed": 3})
        # Assert: the job succeeded on the geometry Q-matrix's own items, and says the students were SIMULATED.
        assert job["status"] == "succeeded", job
        assert job["progress"]["total"] == 20
        assert {i.item_id for c in entities["exact"].contexts for i in c.items} <= {i["id"] for i in GEOMETRY["items"]}
        assert job["metrics"]["simulated_students"] == 20.0
        assert any(n.startswith("SIMULATED validation students: 20 DINA students") and "'geometry'" in n
                   for n in job["notes"]), job["notes"]
        record = client.get(f"/v1/calibrations/{job['calibration_id']}").json()
        assert record["qmatrix_id"] == "geometry" and record["truth_source"] == "simulated-true-mastery"
        assert any("SIMULATED" in n for n in record["notes"]) and record["metrics"]["simulated_students"] == 20.0
        # Simulated students: released without noise by default (nobody to protect), and said so.
        assert any("nobody to protect" in n for n in record["notes"])
        # The known mastery is the truth: 'over' reads the simulated students higher than 'exact' does.
        residuals = record["params"]["residuals"]
        assert all(residuals["over"][c] > residuals["exact"][c] + 0.1 for c in CONCEPTS)  # + 0.3, clipped at 1
        # A diagnosis on the Q-matrix now uses the calibration.
        diagnosis = client.post("/v1/diagnose", json={
            "student_id": "t", "qmatrix_id": "geometry", "epsilon": "none",
            "responses": [{"item_id": "g1", "correct": True}, {"item_id": "g2", "correct": False}],
        }).json()
        assert diagnosis["calibration_id"] == job["calibration_id"]


def test_the_simulated_students_are_seeded(tmp_path: Path) -> None:
    with make_client(tmp_path, _entities()) as client:
        assert client.post("/v1/qmatrices", json=GEOMETRY).status_code == 201
        jobs = [_calibrate(client, dataset={"name": "synthetic", "max_students": 60, "seed": s}) for s in (5, 5, 6)]
        records = [client.get(f"/v1/calibrations/{j['calibration_id']}").json() for j in jobs]
    assert records[0]["params"] == records[1]["params"]  # same seed, same students, same fit
    assert records[0]["params"] != records[2]["params"]


def test_simulated_students_answer_no_more_items_than_a_diagnosis_accepts(tmp_path: Path) -> None:
    entities = _entities()
    with make_client(tmp_path, entities, max_responses_per_student=4) as client:
        assert client.post("/v1/qmatrices", json=GEOMETRY).status_code == 201
        job = _calibrate(client, dataset={"name": "synthetic", "max_students": 50})
    assert job["status"] == "succeeded", job
    assert {len(c.items) for c in entities["exact"].contexts} == {4}
    assert any("4 of 6 items each" in n for n in job["notes"])


def test_an_unknown_or_another_tenants_qmatrix_is_404_before_any_job(tmp_path: Path) -> None:
    with make_client(tmp_path, _entities(), tenant="a") as client:
        assert client.post("/v1/qmatrices", json=GEOMETRY).status_code == 201
        other = bearer(client, tenant="b", role="admin")
        for qid, headers in (("nope", None), ("geometry", other)):
            r = client.post("/v1/calibrate", json={"qmatrix_id": qid, "dataset": {"name": "synthetic"}}, headers=headers)
            assert r.status_code == 404, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "qmatrix_id"]
