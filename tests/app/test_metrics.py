"""GET /metrics after real requests: the gateway with two entities behind the real openai SDK (one steady,
one that retries, fails and trips its circuit breaker), a tight privacy budget, a calibration job; the
scrape must show each series with the exact counts, and never a student id."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app import Settings, create_app
from app.metrics import reset_multiprocess_dir
from providers import EntitySpec
from qmatrix import example_qmatrix
from tests.app.jobs.test_calibrate import Q_ID, _records, _wait
from tests.conftest import auth_headers
from tests.factories import FakeEntity
from tests.providers.wire_servers import WireServer, rate_limited, server_error, success

LOOPBACK = ("127.0.0.1", 50000)  # the test client's address: this machine
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
STUDENTS = [f"student-do-not-label-{n}" for n in range(6)]


def samples(client: TestClient, **headers: str) -> tuple[str, Samples]:
    scrape = client.get("/metrics", headers=headers)
    assert scrape.status_code == 200, scrape.text
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    return scrape.text, parse(scrape.text)


def parse(text: str) -> Samples:
    """(sample name, labels) -> value, from the text exposition format."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(parsed: Samples, name: str, **labels: str) -> float:
    return parsed.get((name, frozenset(labels.items())), 0.0)


def _body(student: str, item: str = "q01") -> dict[str, Any]:
    return {"student_id": student, "qmatrix_id": Q_ID, "responses": [{"item_id": item, "correct": True}]}


@contextmanager
def gateway(tmp_path: Path, specs: list[EntitySpec], *, tenant: str, **values: Any) -> Iterator[TestClient]:
    """The app building its federation from ``specs`` (adapters, wrappers, breakers), with a key of ``tenant``."""
    config = Settings(
        state_dir=tmp_path, entities=specs, preload_models=False, default_calibration=False, local_fed=False,
        train_default_model=False, calibration_release_epsilon=None, noise_seed=1, **values,
    )  # fmt: skip
    app = create_app(config)
    with TestClient(app, client=LOOPBACK) as client:  # a scrape from this machine (no FEDCD_METRICS_TOKEN)
        client.headers.update(auth_headers(app, tenant=tenant))
        yield client


def test_a_scrape_after_real_requests_shows_every_series(tmp_path: Path) -> None:
    # Prepare: unique names, since counters live as long as the test process
    tag = uuid.uuid4().hex[:8]
    tenant, steady, flaky = f"school-{tag}", f"steady-{tag}", f"flaky-{tag}"
    every_concept = {c: 0.5 for c in example_qmatrix().concepts}  # extra keys: one repair per call
    with WireServer() as steady_server, WireServer() as flaky_server:
        steady_server.fallback = success(every_concept)
        flaky_server.script(rate_limited(0), success(every_concept))  # a retry, then an answer
        flaky_server.fallback = server_error(503)  # then down for good
        specs = [
            EntitySpec(name=name, kind="openai_compatible", model="m", base_url=f"{server.url}/v1", api_key="sk-test",
                       max_attempts=2, timeout_s=5.0)
            for name, server in ((steady, steady_server), (flaky, flaky_server))
        ]  # fmt: skip
        # No response cache: the students ask the same prompt, and every one of them must reach the servers.
        settings = {"privacy_cap_epsilon": 100.0, "privacy_warning_fraction": 0.5, "circuit_failure_threshold": 2,
                    "cache_enabled": False}
        with gateway(tmp_path, specs, tenant=tenant, **settings) as client:
            _, before = samples(client)

            # Execute: both answer (64 of 100 spent: a warning); the same student again is refused (429);
            # the flaky entity fails twice (its circuit opens) and is then skipped with reason circuit_open
            first = client.post("/v1/diagnose", json=_body(STUDENTS[0]))
            refused = client.post("/v1/diagnose", json=_body(STUDENTS[0], "q03"))
            failing = [client.post("/v1/diagnose", json=_body(s)).json() for s in STUDENTS[1:4]]
            lookup = client.get(f"/v1/privacy/students/{STUDENTS[0]}")
            listed = {e["name"]: e["circuit"] for e in client.get("/v1/entities").json()["data"]}
            text, after = samples(client)

    # Assert: the responses
    assert first.status_code == 200 and first.json()["budget"]["budget_warning"]
    assert refused.status_code == 429 and lookup.status_code == 200
    assert [r["failure_reasons"] for r in failing] == [{flaky: "unavailable"}] * 2 + [{flaky: "circuit_open"}]
    assert all(r["failed_entities"] == [flaky] for r in failing)
    assert len(flaky_server.requests) == 2 + 2 + 2  # the open circuit cost no request
    assert listed == {steady: "closed", flaky: "open"}

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # HTTP: by route template and status
    http = "fedcd_http_request_duration_seconds_count"
    assert delta(http, method="POST", route="/v1/diagnose", status="200") == 4
    assert delta(http, method="POST", route="/v1/diagnose", status="429") == 1
    assert delta(http, method="GET", route="/v1/privacy/students/{student_id}", status="200") == 1
    # entities: calls by outcome, failures by reason class, retries, repairs, circuit state
    calls = "fedcd_entity_call_duration_seconds_count"
    assert value(after, calls, entity=steady, outcome="ok") == 4
    assert value(after, calls, entity=flaky, outcome="ok") == 1
    assert value(after, calls, entity=flaky, outcome="failed") == 3
    assert value(after, "fedcd_entity_failures_total", entity=flaky, reason="unavailable") == 2
    assert value(after, "fedcd_entity_failures_total", entity=flaky, reason="circuit_open") == 1
    assert value(after, "fedcd_entity_retries_total", entity=flaky, reason="unavailable") == 3
    assert value(after, "fedcd_entity_repairs_total", entity=steady, rule="extra_key") >= 4
    assert value(after, "fedcd_entity_circuit_state", entity=flaky, state="open") == 1
    assert value(after, "fedcd_entity_circuit_state", entity=steady, state="closed") == 1
    assert value(after, "fedcd_circuit_store_up") == 1
    # privacy and diagnoses, per tenant: 64 + 3 × 32 charged (a failed entity is not charged)
    assert value(after, "fedcd_privacy_epsilon_charged_total", tenant=tenant, source="diagnosis") == 64 + 3 * 32
    assert value(after, "fedcd_privacy_budget_refusals_total", tenant=tenant, source="diagnosis") == 1
    assert value(after, "fedcd_privacy_budget_warnings_total", tenant=tenant) == 1
    assert value(after, "fedcd_diagnoses_total", tenant=tenant, repeat="false") == 4
    # never a student id, in any label
    assert not any(student in text for student in STUDENTS)


def test_calibrations_cohorts_mismatches_and_jobs_are_counted(tmp_path: Path) -> None:
    # Prepare
    tenant = f"school-{uuid.uuid4().hex[:8]}"
    entities = {"alpha": FakeEntity("alpha", 0.4), "beta": FakeEntity("beta", 0.6)}
    config = Settings(state_dir=tmp_path, entities=[], preload_models=False, default_calibration=False,
                      calibration_release_epsilon=4.0, noise_seed=1)  # fmt: skip
    app = create_app(config, entities=entities)
    with TestClient(app, headers=auth_headers(app, tenant=tenant), client=LOOPBACK) as client:
        # Execute: a calibration releasing at ε = 4 per validation student, diagnoses at its noise and at
        # another, a cohort report at ε = 1 per student, and one whose students have no budget left
        job = client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(12), "method": "bias",
                                                 "epsilon": 2.0})  # fmt: skip
        assert _wait(client, job.json()["job_id"])["status"] == "succeeded"
        matched = client.post("/v1/diagnose", json={**_body("s1"), "epsilon": 2.0}).json()
        mismatched = client.post("/v1/diagnose", json={**_body("s2"), "epsilon": 4.0}).json()
        cohort = {"qmatrix_id": Q_ID, "students": _records(10), "epsilon": 1.0}
        assert client.post("/v1/cohort-report", json=cohort).status_code == 200
        assert client.post("/v1/cohort-report", json={**cohort, "epsilon": 1000.0}).status_code == 429
        _, parsed = samples(client)

    # Assert
    assert matched["calibration_mismatch"] is None and mismatched["calibration_mismatch"]
    assert value(parsed, "fedcd_calibration_mismatch_total", tenant=tenant) == 1
    charged = "fedcd_privacy_epsilon_charged_total"
    assert value(parsed, charged, tenant=tenant, source="calibration") == 12 * 4.0
    assert value(parsed, charged, tenant=tenant, source="cohort") == 10 * 1.0
    assert value(parsed, charged, tenant=tenant, source="diagnosis") == 2 * 2.0 + 2 * 4.0
    assert value(parsed, "fedcd_privacy_budget_refusals_total", tenant=tenant, source="cohort") == 1
    assert value(parsed, "fedcd_diagnoses_total", tenant=tenant, repeat="false") == 2
    assert value(parsed, "fedcd_jobs", kind="calibrate", state="succeeded") == 1
    assert value(parsed, "fedcd_jobs", kind="calibrate", state="running") == 0
    # entities passed in ready-made (fakes) have no breaker: no circuit series
    assert ("fedcd_entity_circuit_state", frozenset({("entity", "alpha"), ("state", "closed")})) not in parsed


def test_metrics_are_loopback_only_unless_a_token_is_set(tmp_path: Path) -> None:
    for token, status in ((None, 200), ("s3cret-metrics-token", 401)):
        config = Settings(state_dir=tmp_path / str(status), entities=[], preload_models=False, default_calibration=False,
                          metrics_token=token)  # fmt: skip
        with TestClient(create_app(config, entities={"a": FakeEntity("a")}), client=LOOPBACK) as client:
            assert client.get("/metrics").status_code == status
            if token is not None:
                wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
                assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
                assert client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_the_multiprocess_folder_is_emptied_of_an_earlier_run(tmp_path: Path) -> None:
    folder = tmp_path / "prometheus"
    assert reset_multiprocess_dir(folder) == folder and folder.is_dir()
    (folder / "counter_123.db").write_bytes(b"old")
    (folder / "README").write_text("not ours")

    reset_multiprocess_dir(folder)

    assert sorted(p.name for p in folder.iterdir()) == ["README"]


@pytest.mark.parametrize(("address", "headers", "status"), [
    (("203.0.113.9", 40000), {}, 403),  # another machine
    (("testclient", 50000), {}, 403),  # no address: not known to be this machine
    (("127.0.0.1", 40000), {"X-Forwarded-For": "203.0.113.9"}, 403),  # a local proxy forwarding for anyone
    (("127.0.0.1", 40000), {"Via": "1.1 edge"}, 403),  # a proxy that says only that it is one
    (("127.0.0.1", 40000), {"X-Forwarded-Proto": "https"}, 403),
    (("127.0.0.1", 40000), {}, 200),
    (("::1", 40000), {}, 200),
    (("::ffff:127.0.0.1", 40000), {}, 200),  # a local IPv4 client on a dual-stack listener
    (("::ffff:203.0.113.9", 40000), {}, 403),
])
def test_without_a_token_metrics_answer_only_loopback_clients(
    tmp_path: Path, address: tuple[str, int], headers: dict[str, str], status: int
) -> None:
    config = Settings(state_dir=tmp_path, entities=[], preload_models=False, default_calibration=False)
    with TestClient(create_app(config, entities={"a": FakeEntity("a")}), client=address) as client:
        scrape = client.get("/metrics", headers=headers)
        assert scrape.status_code == status, scrape.text
        if status == 403:
            assert "FEDCD_METRICS_TOKEN" in scrape.json()["detail"] and "fedcd_" not in scrape.text
