"""The console's reliability diagram of a calibration is exact in-sample statistics of its validation students: it is
drawn for SIMULATED students and for the tenant's own calibrations released without noise, never for a DP-released
one of real students (the record withholds those statistics) nor for the operator's shared one of real students."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from app.db import SHARED_TENANT
from tests.app.conftest import make_client
from tests.app.console.test_console import sign_in
from tests.app.jobs.test_calibrate import Q_ID, _records, biased
from tests.app.waiting import finished_job, wait_until
from tests.factories import FakeEntity

ENTITIES = {"over": FakeEntity("over", biased(0.2))}
CHART = '<svg class="chart reliability"'


def _calibrate(client: TestClient, release: float | str) -> str:
    body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "bias", "release_epsilon": release}
    r = client.post("/v1/calibrate", json=body)
    assert r.status_code == 202, r.text
    job = finished_job(client, r.json()["job_id"], path="/v1/calibrate/{job_id}")
    assert job["status"] == "succeeded", job
    return str(job["calibration_id"])


def _reliability(client: TestClient, calibration_id: str) -> str:
    page = client.get(f"/console/qmatrices/{Q_ID}?calibration={calibration_id}")
    assert page.status_code == 200, page.text[:500]
    return page.text


def test_a_dp_released_calibration_of_real_students_has_no_diagram_and_says_why(tmp_path: Path) -> None:
    with make_client(tmp_path, ENTITIES, privacy_cap_epsilon=100.0) as client:
        noised, plain = _calibrate(client, 1.0), _calibrate(client, "none")
        client.headers.pop("Authorization")
        sign_in(client)
        page = _reliability(client, noised)
        assert CHART not in page and not re.search(r"<title>predicted ", page)
        assert '<p id="reliability">No reliability diagram: it was released with differential privacy' in page
        assert CHART in _reliability(client, plain)  # unnoised: the record publishes such statistics already


def test_the_operators_shared_calibration_of_real_students_is_not_drawn_for_a_tenant(tmp_path: Path) -> None:
    with make_client(tmp_path, ENTITIES, privacy_cap_epsilon=100.0) as client:
        gateway = client.app.state.gateway  # type: ignore[attr-defined]
        body = {"qmatrix_id": Q_ID, "records": _records(30), "epsilon": "none", "method": "bias",
                "release_epsilon": "none"}
        job_id = gateway.jobs.submit("calibrate", body, tenant=SHARED_TENANT)
        client.headers.pop("Authorization")
        sign_in(client)
        stored = wait_until(lambda: gateway.calibrations.latest_for(SHARED_TENANT, Q_ID, 1), lambda s: s is not None,
                            what=f"shared calibration job {job_id}")
        assert stored.shared
        page = _reliability(client, stored.record.id)
        assert '<p id="reliability">No reliability diagram: it is the operator&#39;s shared calibration' in page
