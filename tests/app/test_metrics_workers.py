"""Several gateway processes: with one PROMETHEUS_MULTIPROC_DIR a scrape of either one counts the requests
both served (prometheus-client's multiprocess mode); with one Redis they share each entity's circuit."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.app.test_metrics import value
from tests.providers.wire_servers import WireServer, server_error
from tests.shared_redis import REDIS_URL

ROOT = Path(__file__).resolve().parents[2]
ENTITY = {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"}


def _body(student: str) -> dict[str, Any]:
    return {"student_id": student, "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}


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


@contextmanager
def two_gateways(tmp_path: Path, entities: list[dict[str, Any]], **settings: str) -> Iterator[list[str]]:
    """Two uvicorn processes on one state dir (SQLite) and one multiprocess metrics folder."""
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        **os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "FEDCD_STATE_DIR": str(tmp_path / "state"),
        "FEDCD_AUTH": "disabled", "FEDCD_ENTITIES": json.dumps(entities), "FEDCD_LOCAL_FED": "false",
        "FEDCD_TRAIN_DEFAULT_MODEL": "false", "FEDCD_DEFAULT_CALIBRATION": "false", "FEDCD_PRELOAD_MODELS": "false",
        "OPENBLAS_NUM_THREADS": "1", **settings,
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


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_scrape_of_one_worker_counts_what_every_worker_served(tmp_path: Path) -> None:
    with two_gateways(tmp_path, [ENTITY]) as (first, second):
        # Execute: 3 health checks and a diagnosis on the first, 5 and a diagnosis on the second
        for url, checks in ((first, 3), (second, 5)):
            for _ in range(checks):
                assert httpx.get(f"{url}/healthz").status_code == 200
            assert httpx.post(f"{url}/v1/diagnose", json=_body(url), timeout=30).status_code == 200
        scrapes = [_scrape(url) for url in (first, second)]

    # Assert: both scrapes see all of it
    for parsed in scrapes:
        route = {"method": "GET", "route": "/healthz", "status": "200"}
        # the readiness polls also hit /healthz: at least the 8 of the test, from both processes
        assert value(parsed, "fedcd_http_request_duration_seconds_count", **route) >= 8
        assert value(parsed, "fedcd_diagnoses_total", tenant="dev", repeat="false") == 2
        assert value(parsed, "fedcd_entity_call_duration_seconds_count", entity="sim:confident", outcome="ok") == 2
        assert value(parsed, "fedcd_entity_circuit_state", entity="sim:confident", state="closed") == 1


def test_two_workers_share_an_entitys_circuit_through_redis(tmp_path: Path, redis_prefix: str) -> None:
    # Prepare: a provider that is down, next to a healthy simulated entity; a threshold of 2
    with WireServer() as down:
        down.fallback = server_error(503)
        dead = {"name": "down", "kind": "openai_compatible", "base_url": f"{down.url}/v1", "model": "m",
                "api_key": "sk-test", "max_attempts": 1}  # fmt: skip
        settings = {"FEDCD_REDIS_URL": REDIS_URL, "FEDCD_CIRCUIT_KEY_PREFIX": redis_prefix,
                    "FEDCD_CIRCUIT_FAILURE_THRESHOLD": "2"}  # fmt: skip
        with two_gateways(tmp_path, [dead, ENTITY], **settings) as (first, second):
            # Execute: one failure in each worker, then both skip it
            reasons = []
            for n, url in enumerate((first, second, first, second)):
                answer = httpx.post(f"{url}/v1/diagnose", json=_body(f"s{n}"), timeout=30)
                assert answer.status_code == 200, answer.text
                reasons.append(answer.json()["failure_reasons"]["down"])
            states = [_scrape(url) for url in (first, second)]

    # Assert
    assert reasons == ["unavailable", "unavailable", "circuit_open", "circuit_open"]
    assert len(down.requests) == 2
    for parsed in states:
        assert value(parsed, "fedcd_entity_circuit_state", entity="down", state="open") == 1
        assert value(parsed, "fedcd_entity_failures_total", entity="down", reason="circuit_open") == 2
