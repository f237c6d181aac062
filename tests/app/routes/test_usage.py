"""Usage accounting through the API: per entity and in total in each response, summed by batches, cohort reports and
calibration jobs, recorded for ``GET /v1/usage`` (both engines, one tenant's never visible to another), counted in
the metrics; and the response cache in front of the built entities (a hit: no tokens, fresh noise, charged)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from providers import EntitySpec
from tests.app.jobs.test_calibrate import Q_ID, _records, _wait
from tests.app.test_metrics import samples, value
from tests.conftest import auth_headers, bearer

PRICES = {"sim:confident": (0.15, 0.60), "sim:specialist": (1.00, 5.00)}


def _specs(tag: str = "") -> list[EntitySpec]:
    return [
        EntitySpec(name=f"{name}{tag}", kind="simulated", simulated_style=name.split(":")[1],  # type: ignore[arg-type]
                   input_usd_per_mtok=cin, output_usd_per_mtok=cout)
        for name, (cin, cout) in PRICES.items()
    ]  # fmt: skip


@contextmanager
def gateway(tmp_path: Path, *, tag: str = "", tenant: str = "school", **values: Any) -> Iterator[TestClient]:
    """The app building priced SIMULATED entities from their specs (adapters, wrappers, the response cache)."""
    config = Settings(
        state_dir=tmp_path, entities=_specs(tag), preload_models=False, default_calibration=False, local_fed=False,
        train_default_model=False, calibration_release_epsilon=None, noise_seed=1, privacy_cap_epsilon=1e6, **values,
    )  # fmt: skip
    app = create_app(config)
    with TestClient(app, client=("127.0.0.1", 50000)) as client:  # this machine: /metrics answers it without a token
        client.headers.update(auth_headers(app, tenant=tenant))
        yield client


def _body(student: str, items: tuple[str, ...] = ("q01", "q03", "q10"), **extra: Any) -> dict[str, Any]:
    return {"student_id": student, "qmatrix_id": Q_ID, "epsilon": 8.0, "include_entities": True,
            "responses": [{"item_id": i, "correct": n % 2 == 0} for n, i in enumerate(items)], **extra}


def test_each_entity_reports_tokens_and_cost_and_the_response_their_total(tmp_path: Path) -> None:
    with gateway(tmp_path) as client:
        # Execute
        r = client.post("/v1/diagnose", json=_body("s1"))
        # Assert
        assert r.status_code == 200, r.text
        body = r.json()
        for entity in body["entities"]:
            usage, (cin, cout) = entity["usage"], PRICES[entity["name"]]
            assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
            assert usage["cost_usd"] == pytest.approx((usage["prompt_tokens"] * cin + usage["completion_tokens"] * cout) / 1e6)
            assert entity["cache"] == "miss"
        total = body["usage"]
        assert total["calls"] == 2 and (total["cache_hits"], total["cache_misses"]) == (0, 2)
        for field in ("prompt_tokens", "completion_tokens", "cost_usd"):
            assert total[field] == pytest.approx(sum(e["usage"][field] for e in body["entities"]))


def test_a_cache_hit_costs_nothing_but_is_privatized_afresh_and_charged(tmp_path: Path) -> None:
    with gateway(tmp_path) as client:
        # Execute: three students with the same responses: the same prompt, so the second and third are hits
        first, second, third = (client.post("/v1/diagnose", json=_body(s)).json() for s in ("s1", "s2", "s3"))
        # Assert
        assert [b["usage"]["cache_hits"] for b in (first, second, third)] == [0, 2, 2]
        assert second["usage"]["cost_usd"] == 0.0 and second["usage"]["prompt_tokens"] == 0
        # fresh noise on each release of the cached answer (the released answers: uncalibrated entities are of unknown
        # skill, so the aggregate of these two may stand at the prior whatever they say)
        assert [e["mastery"] for e in second["entities"]] != [e["mastery"] for e in third["entities"]]
        for body in (second, third):
            assert body["budget"]["charged_epsilon"] == pytest.approx(2 * 8.0)  # both entities' releases charged


def test_the_cache_is_never_shared_across_tenants(tmp_path: Path) -> None:
    """A hit (its speed, its `cache: hit`) would tell a tenant that another asked the same prompt: tenants never
    share cached answers; students of one tenant do."""
    with gateway(tmp_path) as client:
        other = bearer(client, tenant="another-school")
        # Execute: the same prompt, first by this tenant, then by another, then by each again
        mine = client.post("/v1/diagnose", json=_body("s1")).json()
        theirs = client.post("/v1/diagnose", json=_body("t1"), headers=other).json()
        mine_again = client.post("/v1/diagnose", json=_body("s2")).json()
        theirs_again = client.post("/v1/diagnose", json=_body("t2"), headers=other).json()
        # Assert
        assert [b["usage"]["cache_hits"] for b in (mine, theirs, mine_again, theirs_again)] == [0, 0, 2, 2]


def test_a_repeat_spends_nothing_and_reports_no_usage(tmp_path: Path) -> None:
    with gateway(tmp_path) as client:
        client.post("/v1/diagnose", json=_body("s1"))
        again = client.post("/v1/diagnose", json=_body("s1")).json()
        assert again["budget"]["repeat"] is True
        assert again["usage"] == {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0,
                                  "cache_hits": 0, "cache_misses": 0}
        assert client.get("/v1/usage").json()["total"]["calls"] == 2  # the first request only


def test_a_batch_sums_its_results(tmp_path: Path) -> None:
    with gateway(tmp_path) as client:
        students = [{"student_id": f"b{n}", "responses": _body("x", items)["responses"]}
                    for n, items in enumerate([("q01",), ("q01", "q03"), ("q01",)])]
        r = client.post("/v1/diagnose/batch", json={"qmatrix_id": Q_ID, "epsilon": 8.0, "students": students})
        assert r.status_code == 200, r.text
        body = r.json()
        for field in ("calls", "prompt_tokens", "completion_tokens", "cost_usd", "cache_hits", "cache_misses"):
            assert body["usage"][field] == pytest.approx(sum(res["usage"][field] for res in body["results"]))
        assert body["usage"]["calls"] == 6 and body["usage"]["cache_hits"] >= 2  # b0 and b2 ask the same


def test_get_usage_sums_per_entity_since_a_time_on_both_engines(tmp_path: Path, both_engines: str) -> None:
    with gateway(tmp_path) as client:
        responses = [client.post("/v1/diagnose", json=_body(f"s{n}", items)).json()
                     for n, items in enumerate([("q01",), ("q03", "q10"), ("q01",)])]
        # Execute
        report = client.get("/v1/usage").json()
        # Assert
        assert report["tenant"] == "school"
        for field in ("calls", "prompt_tokens", "completion_tokens", "cost_usd", "cache_hits", "cache_misses"):
            assert report["total"][field] == pytest.approx(sum(r["usage"][field] for r in responses)), field
        assert set(report["entities"]) == set(PRICES)
        for name, usage in report["entities"].items():
            mine = [e["usage"] for r in responses for e in r["entities"] if e["name"] == name]
            assert usage["calls"] == 3 and usage["cache_hits"] == 1
            assert usage["cost_usd"] == pytest.approx(sum(u["cost_usd"] for u in mine))
        future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert client.get("/v1/usage", params={"since": future}).json()["total"]["calls"] == 0
        naive_past = (datetime.now(UTC) - timedelta(hours=1)).replace(tzinfo=None).isoformat()
        assert client.get("/v1/usage", params={"since": naive_past}).json()["total"]["calls"] == 6
        lower_case = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dt%H:%M:%Sz")
        assert client.get("/v1/usage", params={"since": lower_case}).json()["total"]["calls"] == 6


def test_another_tenants_usage_is_never_visible(tmp_path: Path, both_engines: str) -> None:
    with gateway(tmp_path) as client:
        assert client.post("/v1/diagnose", json=_body("s1")).status_code == 200
        other = bearer(client, tenant="other-school")
        # Execute / Assert
        theirs = client.get("/v1/usage", headers=other).json()
        assert theirs["tenant"] == "other-school"
        assert theirs["total"]["calls"] == 0 and theirs["entities"] == {}
        client.post("/v1/diagnose", json=_body("s9", ("q01",)), headers=other)
        assert client.get("/v1/usage", headers=other).json()["total"]["calls"] == 2
        assert client.get("/v1/usage").json()["total"]["calls"] == 2


@pytest.mark.parametrize(
    "since", ["yesterday", "2026-13-01T00:00:00", "2026-02-30T00:00:00Z", "1764547200", "0001-01-01T00:00+05:00"]
)
def test_a_bad_since_is_422_naming_the_field(tmp_path: Path, since: str) -> None:
    with gateway(tmp_path) as client:
        r = client.get("/v1/usage", params={"since": since})
        assert r.status_code == 422
        assert r.json()["detail"][0]["loc"] == ["query", "since"]


def test_an_unknown_query_parameter_is_422(tmp_path: Path) -> None:
    with gateway(tmp_path) as client:
        r = client.get("/v1/usage", params={"from": "2026-01-01"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "from"]


def test_cohort_reports_and_calibration_jobs_report_their_usage(tmp_path: Path) -> None:
    with gateway(tmp_path, allow_unnoised=True) as client:  # its calibration of real records is unnoised
        students = [{"student_id": f"c{n}", "responses": _body("x", ("q01", "q03"))["responses"]} for n in range(12)]
        cohort = client.post("/v1/cohort-report", json={"qmatrix_id": Q_ID, "students": students, "epsilon": 2.0})
        assert cohort.status_code == 200, cohort.text
        # 12 identical students, 2 entities: each asked once, then answered from the cache
        assert cohort.json()["usage"]["calls"] == 24 and cohort.json()["usage"]["cache_misses"] == 2
        job = _wait(client, client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(8),
                                                               "epsilon": "none", "method": "bias"}).json()["job_id"])
        assert job["status"] == "succeeded", job
        # 8 different response patterns: every call a miss, every one priced
        assert (job["usage"]["calls"], job["usage"]["cache_misses"]) == (16, 16) and job["usage"]["cost_usd"] > 0
        total = client.get("/v1/usage").json()["total"]
        assert total["calls"] == 24 + 16
        assert total["cost_usd"] == pytest.approx(cohort.json()["usage"]["cost_usd"] + job["usage"]["cost_usd"])


def test_tokens_cost_and_cache_lookups_are_counted_in_the_metrics(tmp_path: Path) -> None:
    tag, tenant = f"-{uuid.uuid4().hex[:8]}", f"school-{uuid.uuid4().hex[:8]}"
    with gateway(tmp_path, tag=tag, tenant=tenant) as client:
        bodies = [client.post("/v1/diagnose", json=_body(s)).json() for s in ("s1", "s2")]
        _, parsed = samples(client)
    for name in PRICES:
        entity = f"{name}{tag}"
        mine = [e for b in bodies for e in b["entities"] if e["name"] == entity]
        assert value(parsed, "fedcd_entity_tokens_total", tenant=tenant, entity=entity, kind="prompt") == sum(
            e["usage"]["prompt_tokens"] for e in mine)
        assert value(parsed, "fedcd_entity_tokens_total", tenant=tenant, entity=entity, kind="completion") == sum(
            e["usage"]["completion_tokens"] for e in mine)
        assert value(parsed, "fedcd_entity_cost_usd_total", tenant=tenant, entity=entity) == pytest.approx(
            sum(e["usage"]["cost_usd"] for e in mine))
        assert value(parsed, "fedcd_response_cache_lookups_total", entity=entity, result="miss") == 1
        assert value(parsed, "fedcd_response_cache_lookups_total", entity=entity, result="hit") == 1


def test_workers_share_the_cache_through_redis(tmp_path: Path, redis_prefix: str) -> None:
    # Prepare: two gateways (as two workers) on one Redis cache prefix, each with its own database
    from tests.shared_redis import REDIS_URL

    redis = {"redis_url": REDIS_URL, "cache_key_prefix": f"{redis_prefix}cache:", "circuit_key_prefix": f"{redis_prefix}c:"}
    with gateway(tmp_path / "one", **redis) as one:
        first = one.post("/v1/diagnose", json=_body("s1")).json()
    with gateway(tmp_path / "two", **redis) as two:
        # Execute: the same prompt on the other worker
        second = two.post("/v1/diagnose", json=_body("s2")).json()
    # Assert
    assert (first["usage"]["cache_misses"], second["usage"]["cache_hits"]) == (2, 2)
    assert second["usage"]["cost_usd"] == 0.0 and second["budget"]["charged_epsilon"] == pytest.approx(16.0)


def test_only_the_configured_kinds_are_cached(tmp_path: Path) -> None:
    # Prepare: caching for a kind none of the entities has
    with gateway(tmp_path, cache_kinds=["openai"]) as client:
        # Execute
        bodies = [client.post("/v1/diagnose", json=_body(s)).json() for s in ("s1", "s2")]
    # Assert: no cache in front of the simulated entities
    assert all(e["cache"] is None for b in bodies for e in b["entities"])
    assert bodies[0]["usage"]["cost_usd"] > 0
    assert bodies[1]["usage"]["cost_usd"] == pytest.approx(bodies[0]["usage"]["cost_usd"])  # asked and paid again


def test_usage_rows_are_written_in_batches_and_never_lost_on_a_failed_write(tmp_path: Path) -> None:
    from app.db import Database
    from app.storage import UsageStore
    from diagnosis import EntityOutcome

    now = [0.0]
    store = UsageStore(Database(f"sqlite:///{tmp_path / 'u.db'}").sessions, flush_s=1.0, max_rows=5,
                       clock=lambda: now[0])
    outcome = EntityOutcome(name="a", status="ok", latency_ms=1.0, mastery={"c": 0.5}, prompt_tokens=10)
    store.record("t1", "diagnosis", [outcome, outcome])
    assert not store.due()  # young and short: buffered
    now[0] = 1.5
    assert store.due()  # old enough
    real_sessions = store.sessions
    store.sessions = None  # type: ignore[assignment]  # the database is gone: the write fails
    with pytest.raises(AttributeError):
        store.flush()
    store.sessions = real_sessions
    store.record("t1", "diagnosis", [outcome] * 3)
    assert store.due()  # 5 rows: full
    assert store.flush() == 5  # the failed batch was kept and written with the new rows
    since = datetime.fromtimestamp(0, UTC)
    assert store.report("t1", since).total.calls == 5 and store.report("t2", since).total.calls == 0


def test_llm_tagging_of_a_qmatrix_extraction_is_in_the_tenants_usage(tmp_path: Path) -> None:
    # Prepare: the priced SIMULATED entities (they refuse a tag question: a failed call is still a call)
    with gateway(tmp_path) as client:
        body = {"id": "tagged", "items": [{"id": "i1", "text": "Add $3 and $4."}, {"id": "i2", "text": "Halve 10."}],
                "concepts": ["Money", "Division"], "method": "llm"}

        # Execute
        r = client.post("/v1/qmatrix-extractions", json=body)

        # Assert: every tag question (2 items x 2 entities) is recorded for the tenant, as a diagnosis's calls are
        assert r.status_code in (200, 422), r.text
        report = client.get("/v1/usage").json()
        assert report["total"]["calls"] == 4, report
        assert set(report["entities"]) == set(PRICES)
