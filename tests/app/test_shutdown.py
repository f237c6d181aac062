"""SIGTERM with embedded model calls still running: the server exits 0 and writes the usage it buffered.

Measured before (issue 20): `fedcd serve` died with SIGSEGV on SIGTERM after embedded calls had passed their
deadline — their threads were still generating when the models were freed, and `Gateway.stop` never reached
the usage flush. Here each call is made to outlive its deadline by far (an unbounded free-text answer of up to
3,000 tokens, a 1 s deadline): the diagnoses are answered (the entity failed, by timeout) while the model
would go on generating, and SIGTERM comes then. Nothing here asserts time; every wait is bounded.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from providers.local_models import LocalModelMissing, packaged_model_path
from tests.app.gateway_processes import free_port, start_gateway

pytestmark = [pytest.mark.llm]

ENTITY = {
    "name": "smollm2", "kind": "llamacpp", "packaged_model": "smollm2", "model": "SmolLM2-135M-Instruct",
    "structured_output": "none", "max_tokens": 3000, "concurrency": 1, "deadline_s": 1.0, "max_attempts": 1,
}


def _diagnose(url: str, student: str) -> int:
    body = {"student_id": student, "qmatrix_id": "example-prealgebra",
            "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q02", "correct": False}]}
    return httpx.post(f"{url}/v1/diagnose", json=body, timeout=120).status_code


def test_sigterm_while_embedded_calls_run_exits_zero_and_flushes_usage(tmp_path: Path) -> None:
    try:
        packaged_model_path("smollm2")
    except LocalModelMissing as exc:
        pytest.skip(str(exc))
    state, log = tmp_path / "state", tmp_path / "gateway.log"
    env = {
        "FEDCD_STATE_DIR": str(state), "FEDCD_AUTH": "disabled", "FEDCD_ENTITIES": json.dumps([ENTITY]),
        "FEDCD_TRAIN_DEFAULT_MODEL": "false", "FEDCD_PRIVACY_CAP_EPSILON": "1e6", "OPENBLAS_NUM_THREADS": "1",
        # No maintenance tick before the end: only the shutdown can write the buffered usage.
        "FEDCD_WORKER_HEARTBEAT_S": "3600", "FEDCD_WORKER_STALE_S": "7200",
    }
    port = free_port()
    proc = start_gateway(port, env, log=log)
    try:
        url = f"http://127.0.0.1:{port}"
        with ThreadPoolExecutor(3) as pool:
            statuses = list(pool.map(lambda k: _diagnose(url, f"student-{k}"), range(3)))
        # Each diagnosis was answered (its one entity timed out: 503) while its model call may still be running.
        assert all(status in (200, 503) for status in statuses), statuses
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    except BaseException:
        proc.kill()
        proc.wait(timeout=30)
        raise
    output = log.read_text(errors="replace")
    assert code == 0, (code, output[-3000:])
    assert "Application shutdown complete" in output, output[-3000:]
    with sqlite3.connect(state / "fedcd.db") as db:
        rows = db.execute("SELECT entity, status FROM usage WHERE source = 'diagnosis'").fetchall()
    assert len(rows) == 3 and {entity for entity, _ in rows} == {"smollm2"}, rows

