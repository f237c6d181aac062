"""A diagnosis in flight at ``kill -9``: its charge stays pending, is refunded at the next start, and the
identical retry is then answered normally (a real gateway process, killed for real)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from app.auth import KeyStore
from app.db import Database
from tests.app.gateway_processes import free_port, start_gateway
from tests.providers.wire_servers import Delay, WireServer, success

REPLY = success({"Add and subtract fractions": 0.6, "Solve two-step linear equations": 0.4})
BODY = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "epsilon": 2.0,
        "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": False}]}


def _start(state: Path, port: int, wire: WireServer) -> subprocess.Popen[bytes]:
    entity = {"name": "stub", "kind": "openai_compatible", "base_url": f"{wire.url}/v1", "model": "m",
              "max_attempts": 1, "deadline_s": 60, "timeout_s": 60}
    return start_gateway(port, {"FEDCD_STATE_DIR": str(state), "FEDCD_ENTITIES": json.dumps([entity]),
                                "FEDCD_PRIVACY_CAP_EPSILON": "100"})


def _charges(state: Path) -> list[tuple[str, int]]:
    engine = create_engine(f"sqlite:///{state / 'fedcd.db'}")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, releases FROM privacy_charges ORDER BY seq")).all()
    engine.dispose()
    return [(r[0], r[1]) for r in rows]


def test_kill_minus_nine_mid_diagnosis_then_an_identical_retry(tmp_path: Path) -> None:
    key = KeyStore(Database(f"sqlite:///{tmp_path / 'fedcd.db'}").sessions).create(tenant="t", role="client").api_key
    headers = {"Authorization": f"Bearer {key}"}
    port = free_port()
    with WireServer(fallback=REPLY) as wire:
        wire.script(Delay(30, REPLY))  # the first call hangs: the gateway is killed while it waits
        proc = _start(tmp_path, port, wire)
        try:
            thread = threading.Thread(
                target=lambda: httpx.post(f"http://127.0.0.1:{port}/v1/diagnose", json=BODY, headers=headers, timeout=60),
                daemon=True,
            )
            thread.start()
            deadline = time.monotonic() + 20
            while not wire.requests_to("/v1/chat/completions"):  # charged, and the entity is being asked
                assert time.monotonic() < deadline
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert _charges(tmp_path) == [("charged", 1)]  # pending: charged, no answer stored
        proc = _start(tmp_path, port, wire)  # the restart settles the dead process's pending charge
        try:
            assert _charges(tmp_path) == [("refunded", 1)]
            # the retry is answered (a request stuck behind the dead process's charge would hit the 30 s timeout)
            r = httpx.post(f"http://127.0.0.1:{port}/v1/diagnose", json=BODY, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["budget"]["repeat"] is False and r.json()["budget"]["spent_epsilon"] == 2.0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
    assert _charges(tmp_path) == [("refunded", 1), ("released", 1)]
