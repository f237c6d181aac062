"""No student id, item text, free-text answer or key reaches a log line (diagnosis, calibration, 429, failed entity)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from app.logs import configure_logging
from tests.conftest import auth_headers
from tests.providers.wire_servers import WireServer, server_error, success

STUDENT = "alice-canary-7731"
ITEM_TEXT = "CANARY-ITEM-TEXT what is 3/7 + 1/7"
ANSWER = "CANARY-ANSWER my name is Alice, 4/7"
PROVIDER_KEY = "sk-canary-provider-key-0123456789abcdef"
Q = {"id": "canaryq", "concepts": ["A"], "items": [{"id": "i1", "text": ITEM_TEXT, "concepts": ["A"]}]}


def test_no_student_id_item_text_answer_or_key_in_any_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY_PROVIDER_KEY", PROVIDER_KEY)
    configure_logging("DEBUG")
    responses = [{"item_id": "i1", "correct": True, "answer": ANSWER}]
    with WireServer(fallback=success({"A": 0.7})) as good, WireServer(fallback=server_error(500)) as bad:
        entities = [
            {"name": "good", "kind": "openai_compatible", "base_url": f"{good.url}/v1", "model": "m",
             "api_key_env": "CANARY_PROVIDER_KEY", "max_attempts": 1},
            {"name": "bad", "kind": "openai_compatible", "base_url": f"{bad.url}/v1", "model": "m",
             "api_key_env": "CANARY_PROVIDER_KEY", "max_attempts": 2},
        ]
        settings = Settings(
            state_dir=tmp_path, entities=entities, preload_models=False, default_calibration=False,  # type: ignore[arg-type]
            privacy_cap_epsilon=3.0, send_answer_text=True, calibration_release_epsilon=None,
            allow_unnoised=True,  # its calibration of real records asks for "epsilon": "none"
        )
        app = create_app(settings)
        headers = auth_headers(app, tenant="school", role="admin")
        with caplog.at_level(logging.DEBUG), TestClient(app, headers=headers) as client:
            assert client.post("/v1/qmatrices", json=Q).status_code == 201
            body = {"student_id": STUDENT, "qmatrix_id": "canaryq", "responses": responses, "epsilon": 1.0}
            first = client.post("/v1/diagnose", json=body)  # 'bad' fails (a failed entity), 'good' answers
            assert first.status_code == 200 and first.json()["failed_entities"] == ["bad"]
            refused = client.post("/v1/diagnose", json={**body, "epsilon": 2.5})  # the budget: 429
            assert refused.status_code == 429
            assert client.get(f"/v1/privacy/students/{STUDENT}").status_code == 200
            records = [{"student_id": STUDENT, "responses": responses}, {"student_id": "bob-canary", "responses": responses}]
            job = client.post("/v1/calibrate", json={"qmatrix_id": "canaryq", "records": records, "epsilon": "none"}).json()
            deadline = time.monotonic() + 20
            while client.get(f"/v1/calibrate/{job['job_id']}").json()["status"] in ("queued", "running"):
                assert time.monotonic() < deadline
                time.sleep(0.05)
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "fedcd.access" in text and "POST /v1/diagnose 429" in text  # the log did capture the requests
    for secret in (STUDENT, "bob-canary", ITEM_TEXT, "CANARY-ITEM", ANSWER, "CANARY-ANSWER", PROVIDER_KEY,
                   headers["Authorization"].split()[1]):
        assert secret not in text, secret
