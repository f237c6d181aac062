"""/v1/cohort-report is bounded by FEDCD_MAX_COHORT_SIZE: every student is diagnosed by every entity, so a larger
cohort is refused (422 naming ``students``) before any entity is called or anyone is charged."""

from __future__ import annotations

from pathlib import Path

from tests.app.routes.test_cohort import _students
from tests.conftest import bearer, make_client
from tests.factories import FakeEntity


def test_a_cohort_over_the_cap_is_refused_before_any_entity_call(tmp_path: Path) -> None:
    fake = FakeEntity("alpha", 0.4)
    with make_client(tmp_path, {"alpha": fake}, max_cohort_size=12, min_cohort_size=10) as client:
        headers = bearer(client, tenant="default", role="client")
        body = {"qmatrix_id": "example-prealgebra", "epsilon": 1.0}
        r = client.post("/v1/cohort-report", headers=headers, json={**body, "students": _students(13)})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "students"]
        assert "FEDCD_MAX_COHORT_SIZE" in r.json()["detail"][0]["msg"]
        assert fake.contexts == []  # no entity was asked
        assert client.get("/v1/privacy/students/c0").json()["spent_epsilon"] == 0.0
        assert client.post("/v1/cohort-report", headers=headers, json={**body, "students": _students(12)}).status_code == 200
