"""Several gateway processes: with one PROMETHEUS_MULTIPROC_DIR a scrape of either one counts the requests
both served (prometheus-client's multiprocess mode); with one Redis they share each entity's circuit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.app.gateway_processes import free_port, gateway_process
from tests.app.test_metrics import Samples, parse, value
from tests.providers.wire_servers import WireServer, server_error
from tests.shared_redis import REDIS_URL

ENTITY = {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"}


def _body(student: str) -> dict[str, Any]:
    return {"student_id": student, "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}


@contextmanager
def two_gateways(tmp_path: Path, entities: list[dict[str, Any]], **settings: str) -> Iterator[list[str]]:
    """Two gateway processes (``fedcd serve``) on one state dir (SQLite) and one multiprocess metrics folder."""
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "FEDCD_STATE_DIR": str(tmp_path / "state"),
        "FEDCD_AUTH": "disabled", "FEDCD_ENTITIES": json.dumps(entities), "FEDCD_TRAIN_DEFAULT_MODEL": "false",
        "OPENBLAS_NUM_THREADS": "1", **settings,
    }  # fmt: skip
    ports = [free_port(), free_port()]
    with ExitStack() as stack:
        for port in ports:
            stack.enter_context(gateway_process(port, env, log=tmp_path / f"gateway-{port}.log"))
        yield [f"http://127.0.0.1:{port}" for port in ports]


def _scrape(url: str) -> Samples:
    return parse(httpx.get(f"{url}/metrics").text)


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


def test_fedcd_serve_with_workers_counts_in_one_multiprocess_folder(tmp_path: Path) -> None:
    # Prepare: `fedcd serve --workers 2`, no PROMETHEUS_MULTIPROC_DIR given; a stale file from an earlier run
    state = tmp_path / "state"
    (state / "prometheus").mkdir(parents=True)
    (state / "prometheus" / "counter_1.db").write_bytes(b"stale")
    env = {"FEDCD_STATE_DIR": str(state), "FEDCD_AUTH": "disabled", "FEDCD_ENTITIES": json.dumps([ENTITY]),
           "FEDCD_TRAIN_DEFAULT_MODEL": "false", "OPENBLAS_NUM_THREADS": "1"}  # fmt: skip
    port = free_port()
    with gateway_process(port, env, workers=2, log=tmp_path / "serve.log"):
        url = f"http://127.0.0.1:{port}"
        # Execute
        for n in range(10):
            assert httpx.post(f"{url}/v1/diagnose", json=_body(f"s{n}"), timeout=30).status_code == 200
        parsed = _scrape(url)

    # Assert: whichever worker answered each request and the scrape, all ten are counted, from the folder
    assert value(parsed, "fedcd_diagnoses_total", tenant="dev", repeat="false") == 10
    files = sorted(p.name for p in (state / "prometheus").glob("*.db"))
    assert files and "counter_1.db" not in files
