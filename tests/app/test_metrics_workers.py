"""Several gateway processes, one PROMETHEUS_MULTIPROC_DIR: a scrape of either one counts the requests
both served (prometheus-client's multiprocess mode), and the circuit state comes from the shared store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.app.test_metrics import value

ROOT = Path(__file__).resolve().parents[2]
ENTITY = {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"gateway exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"gateway at {url} not ready within {timeout_s} s")


@pytest.fixture
def two_gateways(tmp_path: Path) -> Iterator[list[str]]:
    """Two uvicorn processes on one state dir (SQLite) and one multiprocess metrics folder."""
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        **os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "FEDCD_STATE_DIR": str(tmp_path / "state"),
        "FEDCD_AUTH": "disabled", "FEDCD_ENTITIES": json.dumps([ENTITY]), "FEDCD_LOCAL_FED": "false",
        "FEDCD_TRAIN_DEFAULT_MODEL": "false", "FEDCD_DEFAULT_CALIBRATION": "false", "FEDCD_PRELOAD_MODELS": "false",
        "FEDCD_CIRCUIT_FAILURE_THRESHOLD": "3", "OPENBLAS_NUM_THREADS": "1",
    }  # fmt: skip
    env.pop("FEDCD_CONFIG", None)
    processes, urls = [], []
    try:
        for _ in range(2):
            port = _free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host", "127.0.0.1",
                 "--port", str(port), "--log-level", "warning"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            ))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            _wait_ready(url, process)
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_a_scrape_of_one_worker_counts_what_every_worker_served(two_gateways: list[str]) -> None:
    # Prepare
    first, second = two_gateways
    body = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}

    # Execute: 3 health checks and a diagnosis on the first, 5 and a diagnosis on the second
    for url, checks in ((first, 3), (second, 5)):
        for _ in range(checks):
            assert httpx.get(f"{url}/healthz").status_code == 200
        assert httpx.post(f"{url}/v1/diagnose", json={**body, "student_id": url}, timeout=30).status_code == 200
    scrapes = [httpx.get(f"{url}/metrics").text for url in (first, second)]

    # Assert: both scrapes see all of it
    for text in scrapes:
        parsed = {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        route = {"method": "GET", "route": "/healthz", "status": "200"}
        # the readiness polls also hit /healthz: at least the 8 of the test, from both processes
        assert value(parsed, "fedcd_http_request_duration_seconds_count", **route) >= 8
        assert value(parsed, "fedcd_diagnoses_total", tenant="dev", repeat="false") == 2
        assert value(parsed, "fedcd_entity_call_duration_seconds_count", entity="sim:confident", outcome="ok") == 2
        assert value(parsed, "fedcd_entity_circuit_state", entity="sim:confident", state="closed") == 1
