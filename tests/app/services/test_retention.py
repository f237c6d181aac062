"""Retention (issue 22, part 3): released diagnoses, uploaded responses and finished jobs' inputs are purged once
their tenant's policy says they expired — the spend stays, so the budget is never reset.

The purge takes the time it runs at, so "31 days later" is a parameter, not a wait.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from app import Settings
from tests.app.routes.test_student_data import BANK, RESPONSES, STUDENT, diagnose, query, student_app
from tests.app.waiting import finished_job
from tests.conftest import auth_headers

DAY = 86400.0


def test_the_purge_removes_what_expired_and_keeps_the_spend(tmp_path: Path, both_engines: str) -> None:
    with student_app(tmp_path) as client:
        admin = auth_headers(client.app, tenant="platform")
        assert client.post("/v1/qmatrices", json=BANK, headers=admin).status_code == 201
        gateway, url = client.app.state.gateway, client.app.state.gateway.settings.db_url
        first = diagnose(client, admin)
        records = [{"student_id": f"{STUDENT}-{n}", "responses": RESPONSES} for n in range(3)]
        r = client.post("/v1/calibrate", headers=admin, json={"qmatrix_id": "geometry", "records": records})
        assert finished_job(client, r.json()["job_id"], headers=admin)["status"] == "succeeded"
        uploads = tmp_path / "state" / "uploads"
        uploads.mkdir(exist_ok=True)
        now = time.time()
        old, fresh = uploads / "old.csv", uploads / "fresh.csv"
        for path in (old, fresh):
            path.write_text("student_id,item_id,correct\nx,g0,1\n")
        os.utime(old, (now - 8 * DAY, now - 8 * DAY))  # older than the 7-day default, with no job to own it

        # Today: only the abandoned upload has expired
        assert gateway.purger.purge(now=now) == {"diagnoses": 0, "job_inputs": 0, "job_results": 0, "uploads": 1}
        assert not old.exists() and fresh.exists()
        assert len(client.get(f"/v1/students/{STUDENT}/export", headers=admin).json()["diagnoses"]) == 1

        # 31 days later (the defaults: 30 for diagnoses and job inputs, 7 for uploads)
        later = gateway.purger.purge(now=now + 31 * DAY)
        assert later == {"diagnoses": 1, "job_inputs": 3, "job_results": 3, "uploads": 1}, later
        assert gateway.purger.purge(now=now + 31 * DAY) == dict.fromkeys(later, 0)  # idempotent
        export = client.get(f"/v1/students/{STUDENT}/export", headers=admin).json()
        assert export["diagnoses"] == [] and [c["source"] for c in export["charges"]] == ["diagnosis"]
        assert export["budget"]["lifetime_epsilon"] == pytest.approx(first["budget"]["lifetime_epsilon"])
        assert query(url, "SELECT source, answer_json IS NULL, fingerprint FROM privacy_charges ORDER BY seq") == [
            ("diagnosis", True, None), *[("calibration", False, None)] * 3]  # a calibration's name stays: the audit
        assert query(url, "SELECT count(*) FROM job_items") == [(0,)]
        assert all('"responses"' not in r for (r,) in query(url, "SELECT request_json FROM jobs"))
        assert client.get(f"/v1/students/{STUDENT}-0/export", headers=admin).json()["jobs"] == []
        # The same request again is a new, paid query counted on top (the stored answer is gone, the spend is not)
        again = diagnose(client, admin)
        assert again["budget"]["lifetime_epsilon"] == pytest.approx(
            first["budget"]["lifetime_epsilon"] + again["budget"]["charged_epsilon"])


def test_each_tenant_sets_its_own_policy_within_the_repeat_window(tmp_path: Path) -> None:
    with student_app(tmp_path) as client:
        short, standard = auth_headers(client.app, tenant="short"), auth_headers(client.app, tenant="standard")
        default = client.get("/v1/admin/retention", headers=short).json()
        assert default == {"tenant": "short", "default": True, "diagnoses_days": 30.0, "responses_days": 7.0,
                           "job_inputs_days": 30.0, "updated_at": None, "updated_by": None}
        policy = {"diagnoses_days": 1, "responses_days": 1, "job_inputs_days": None}
        r = client.put("/v1/admin/retention", headers=short, json=policy)
        assert r.status_code == 200 and r.json()["default"] is False and r.json()["diagnoses_days"] == 1
        assert client.get("/v1/admin/retention", headers=short).json()["job_inputs_days"] is None
        assert client.get("/v1/admin/retention", headers=standard).json()["default"] is True

        # Shorter than the repeat window (1 h): a repeat would find nothing and be charged again — refused
        r = client.put("/v1/admin/retention", headers=short, json={**policy, "diagnoses_days": 0.01})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "diagnoses_days"]
        assert client.put("/v1/admin/retention", headers=short, json={**policy, "months": 1}).status_code == 422
        assert client.put("/v1/admin/retention", headers=short, json={**policy, "responses_days": 0}).status_code == 422
        # JSON true is not a number of days (found by schemathesis, seed 9305117), nor is a day count past a century
        for bad in ({"diagnoses_days": True}, {"job_inputs_days": 1e300}):
            r = client.put("/v1/admin/retention", headers=short, json={**policy, **bad})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", *bad], r.text
        client_key = auth_headers(client.app, tenant="short", role="client")
        assert client.put("/v1/admin/retention", headers=client_key, json=policy).status_code == 403

        for headers in (short, standard):
            assert client.post("/v1/qmatrices", json=BANK, headers=headers).status_code == 201
            diagnose(client, headers)
        purged = client.app.state.gateway.purger.purge(now=time.time() + 2 * DAY)
        assert purged["diagnoses"] == 1  # the short tenant's; the standard one keeps its 30 days
        assert client.get(f"/v1/students/{STUDENT}/export", headers=short).json()["diagnoses"] == []
        assert len(client.get(f"/v1/students/{STUDENT}/export", headers=standard).json()["diagnoses"]) == 1
        export = client.get(f"/v1/students/{STUDENT}/export", headers=short).json()
        assert export["retention"]["diagnoses_days"] == 1 and len(export["charges"]) == 1


def test_the_default_must_outlive_the_repeat_window(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="repeat"):
        Settings(state_dir=tmp_path, retention_diagnoses_days=0.01)
    Settings(state_dir=tmp_path, retention_diagnoses_days=0.01, privacy_repeat_window_s=60)
    assert Settings(state_dir=tmp_path, retention_diagnoses_days=None).retention_diagnoses_days is None


def test_the_maintenance_loop_purges_on_schedule(tmp_path: Path) -> None:
    """Every worker purges at its first heartbeat (what expired while it was down), then every retention_sweep_s."""
    with student_app(tmp_path, worker_heartbeat_s=0.01, retention_sweep_s=0.01) as client:
        gateway, calls = client.app.state.gateway, []
        original = gateway.purger.purge
        gateway.purger.purge = lambda now=None: calls.append(now) or original(now)  # type: ignore[method-assign]
        for _ in range(2000):  # bounded polls
            if len(calls) >= 2:
                break
            time.sleep(0.01)
    assert len(calls) >= 2 and calls[0] is None  # the loop purges at the time it runs
