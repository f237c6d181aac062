"""Prompt data minimisation, end to end: what reaches a provider's wire after POST /v1/diagnose."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from app import Settings, create_app
from tests.conftest import auth_headers
from tests.providers.wire_servers import WireServer, success

STUDENT = "alice-liddell-4411"
ANSWER = "My name is Alice Liddell and I think it is 11/15"


def _client(tmp_path: Path, server: WireServer, **settings: object) -> TestClient:
    entity = {"name": "stub", "kind": "openai_compatible", "base_url": f"{server.url}/v1", "model": "stub-model", "max_attempts": 1}
    config = Settings(state_dir=tmp_path, entities=[entity], preload_models=False, default_calibration=False, allow_unnoised=True, **settings)  # type: ignore[arg-type]
    app = create_app(config)
    return TestClient(app, headers=auth_headers(app))


def _diagnose(client: TestClient) -> None:
    body = {
        "student_id": STUDENT,
        "qmatrix_id": "example-prealgebra",
        "responses": [{"item_id": "q01", "correct": False, "answer": ANSWER}, {"item_id": "q10", "correct": True}],
        "epsilon": "none",
    }
    r = client.post("/v1/diagnose", json=body)
    assert r.status_code == 200, r.text


def test_no_student_identifier_or_free_text_reaches_the_provider(tmp_path: Path) -> None:
    reply = success({"Add and subtract fractions": 0.2, "Solve two-step linear equations": 0.9})
    with WireServer(fallback=reply) as server, _client(tmp_path, server) as client:
        _diagnose(client)
        [request] = server.requests_to("/v1/chat/completions")
    wire = request.body.decode() + json.dumps(request.headers) + request.path
    assert STUDENT not in wire and "alice" not in wire.lower()
    assert ANSWER not in wire
    # Only the answered items' text (Q-relevant) and correctness are sent.
    assert "Compute 2/5 + 1/3." in request.text and "Solve for x: 3x - 5 = 16." in request.text
    assert "Compute 3/4 x 2/9." not in request.text  # q03 was not answered
    assert "Order of operations" not in request.text  # not assessed by q01 or q10


def test_free_text_answers_are_sent_only_when_enabled(tmp_path: Path) -> None:
    reply = success({"Add and subtract fractions": 0.2, "Solve two-step linear equations": 0.9})
    with WireServer(fallback=reply) as server, _client(tmp_path, server, send_answer_text=True) as client:
        _diagnose(client)
        [request] = server.requests_to("/v1/chat/completions")
    assert ANSWER in request.text
    assert STUDENT not in request.body.decode()
