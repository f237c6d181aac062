"""Per-tenant request rate limits (a token bucket, in-process or shared through Redis) and ``Retry-After`` on every
429: the rate limit's, the privacy budget's (single, cohort) and a batch's refused students.

No assertion depends on how fast the machine is: limits are 2 per minute, so the third request is refused however
quickly or slowly the first two ran; bucket arithmetic runs on a fake clock.
"""

from __future__ import annotations

import logging
import socket
import uuid
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from app.errors import NO_RENEWAL_RETRY_AFTER_S
from app.ratelimit import (
    MemoryBuckets,
    Rate,
    RateLimited,
    RateLimiter,
    RedisBuckets,
    parse_rate,
    warn_per_worker_buckets,
)
from tests.conftest import bearer, make_client
from tests.factories import FakeEntity

Q = "example-prealgebra"
ITEMS = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]


def _body(n: int, student: str = "s1", **extra: object) -> dict:
    return {"student_id": student, "qmatrix_id": Q, **extra,
            "responses": [{"item_id": i, "correct": bool((n >> k) & 1)} for k, i in enumerate(ITEMS)]}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the rate syntax and the bucket --------------------------------------------------------------------------


@pytest.mark.parametrize("text,rate", [
    ("50/second burst 100", Rate(50, 1.0, 100)),
    ("2/minute", Rate(2, 60.0, 2)),
    ("10 per hour, burst 3", Rate(10, 3600.0, 3)),
    ("1000/day", Rate(1000, 86400.0, 1000)),
    ("5/seconds;burst=7", Rate(5, 1.0, 7)),
])
def test_rates_are_read(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["", "50", "0/second", "5/fortnight", "5/second burst 0", "fast"])
def test_unreadable_rates_are_refused_at_start(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rate(text)


def test_off_disables_the_limit() -> None:
    assert parse_rate("off") is None


async def test_a_bucket_allows_its_burst_then_one_request_per_interval() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(2, 60.0, 2), MemoryBuckets(clock=clock))
    await limiter.check("a")
    await limiter.check("a")
    with pytest.raises(RateLimited) as refused:
        await limiter.check("a")
    assert refused.value.retry_after_s == 30  # one token back every 60/2 s
    clock.now += 29.5
    with pytest.raises(RateLimited) as refused:
        await limiter.check("a")
    assert refused.value.retry_after_s == 1  # 0.5 s rounded up: never 0
    clock.now += 0.5
    await limiter.check("a")  # a token is back
    await limiter.check("b")  # another tenant's bucket is its own


async def test_a_burst_larger_than_the_rate_refills_at_the_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(1, 1.0, 5), MemoryBuckets(clock=clock))
    for _ in range(5):
        await limiter.check("a")
    with pytest.raises(RateLimited):
        await limiter.check("a")
    clock.now += 3
    for _ in range(3):
        await limiter.check("a")
    with pytest.raises(RateLimited):
        await limiter.check("a")


# -- through the API -----------------------------------------------------------------------------------------


def test_a_tenant_over_its_rate_gets_429_while_another_tenant_is_served(tmp_path: Path) -> None:
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}, tenant="busy", rate_limit="2/minute",
                     metrics_token="scrape-token") as client:
        other = bearer(client, tenant="quiet")
        # Execute: the busy tenant sends three requests
        codes = [client.get("/v1/qmatrices").status_code for _ in range(3)]
        refused = client.get("/v1/qmatrices")
        # Assert: its third is refused as a rate limit, with Retry-After; the quiet tenant is served meanwhile
        assert codes == [200, 200, 429]
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 30
        body = refused.json()
        assert body["type"] == "rate_limit" and body["retry_after_s"] == int(refused.headers["Retry-After"])
        assert "rate limit" in body["detail"] and "not a privacy budget" in body["detail"]
        assert client.get("/v1/qmatrices", headers=other).status_code == 200
        assert client.post("/v1/diagnose", json=_body(1), headers=other).status_code == 200
        # Unauthenticated requests are 401 (no tenant to charge), health and metrics are never limited
        assert client.get("/v1/qmatrices", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert all(client.get("/healthz").status_code == 200 for _ in range(5))
        metrics = client.get("/metrics", headers={"Authorization": "Bearer scrape-token"}).text
        assert 'fedcd_rate_limited_total{tenant="busy"}' in metrics


def test_a_tenant_may_have_its_own_rate(tmp_path: Path) -> None:
    settings = {"rate_limit": "2/minute", "rate_limit_tenants": {"big": "off", "tiny": "1/hour"}}
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}, tenant="big", **settings) as client:
        assert all(client.get("/v1/qmatrices").status_code == 200 for _ in range(10))
        tiny = bearer(client, tenant="tiny")
        assert client.get("/v1/qmatrices", headers=tiny).status_code == 200
        refused = client.get("/v1/qmatrices", headers=tiny)
        assert refused.status_code == 429 and 3500 <= int(refused.headers["Retry-After"]) <= 3600


def test_workers_share_the_bucket_through_redis(tmp_path: Path, redis_prefix: str) -> None:
    from tests.shared_redis import REDIS_URL

    shared = {"rate_limit": "2/minute", "redis_url": REDIS_URL, "rate_limit_key_prefix": f"{redis_prefix}rl:",
              "circuit_key_prefix": f"{redis_prefix}c:", "cache_key_prefix": f"{redis_prefix}cache:"}
    entities = {"a": FakeEntity("a", 0.4)}
    # Two gateways (as two workers), each with its own database, one Redis: the tenant's requests add up
    with make_client(tmp_path / "one", entities, tenant="school", **shared) as one:
        assert [one.get("/v1/qmatrices").status_code for _ in range(2)] == [200, 200]
    with make_client(tmp_path / "two", entities, tenant="school", **shared) as two:
        refused = two.get("/v1/qmatrices")
        assert refused.status_code == 429 and refused.json()["type"] == "rate_limit"
        assert 1 <= int(refused.headers["Retry-After"]) <= 30
        assert two.get("/v1/qmatrices", headers=bearer(two, tenant="other")).status_code == 200


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _fail_open(tenant: str) -> float:
    return REGISTRY.get_sample_value("fedcd_rate_limit_fail_open_total", {"tenant": tenant}) or 0.0


async def test_the_limit_lets_requests_through_while_redis_is_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    """Let through (a down Redis must not take the API down), but never silently: each such request is counted in
    fedcd_rate_limit_fail_open_total, and a warning is logged once per interval, not once per request."""
    caplog.set_level(logging.WARNING, logger="fedcd.ratelimit")
    tenant = f"fail-open-{uuid.uuid4().hex[:8]}"
    buckets = RedisBuckets(f"redis://127.0.0.1:{_closed_port()}/0", prefix="fedcd-test-unreachable:", timeout_s=0.2)
    limiter = RateLimiter(Rate(1, 60.0, 1), buckets)
    before = _fail_open(tenant)
    try:
        for _ in range(3):  # would be refused from the second on
            await limiter.check(tenant)
    finally:
        await limiter.aclose()
    assert _fail_open(tenant) - before == 3
    warnings = [r for r in caplog.records if r.name == "fedcd.ratelimit" and "not enforced" in r.getMessage()]
    assert len(warnings) == 1 and "fedcd_rate_limit_fail_open_total" in warnings[0].getMessage()


@pytest.mark.parametrize("workers,redis,rate,tenants,warned", [
    (4, False, "100/second burst 1000", {}, True),
    (2, False, "off", {"big": "5/minute"}, True),  # one tenant's own limit is a limit too
    (1, False, "100/second", {}, False),  # one worker: its bucket is the only one
    (4, True, "100/second", {}, False),  # shared through Redis
    (4, False, "off", {"big": "off"}, False),  # nothing to enforce
])
def test_several_workers_without_redis_warn_that_each_has_its_own_bucket(
    caplog: pytest.LogCaptureFixture, workers: int, redis: bool, rate: str, tenants: dict[str, str], warned: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="fedcd.ratelimit")
    message = warn_per_worker_buckets(rate_limit=rate, tenant_rates=tenants, shared=redis, workers=workers)
    logged = [r.getMessage() for r in caplog.records if r.name == "fedcd.ratelimit"]
    if not warned:
        assert message is None and logged == []
        return
    assert logged == [message] and message is not None
    assert f"{workers}x" in message and "per tenant" in message and "FEDCD_REDIS_URL" in message


# -- Retry-After on the privacy budget's 429s ----------------------------------------------------------------


def _policy(**overrides: object) -> dict:
    return {"period": {"kind": "lifetime"}, "cap_epsilon": 2.0, "cap_delta": 1e-4, "default_mechanism": "laplace",
            "default_epsilon": 1.0, "sensitivity": "assessed", "allow_unnoised": False, "warning_fraction": 0.2,
            **overrides}


def test_a_spent_budget_that_renews_says_when_in_retry_after(tmp_path: Path) -> None:
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}) as client:
        client.put("/v1/admin/privacy-policy", json=_policy(period={"kind": "rolling", "window_s": 3600}))
        assert client.post("/v1/diagnose", json=_body(1, epsilon=2.0)).status_code == 200
        refused = client.post("/v1/diagnose", json=_body(2, epsilon=2.0))
    assert refused.status_code == 429
    body = refused.json()
    assert body["type"] == "privacy_budget" and body["renews_at"] is not None
    assert 3000 <= int(refused.headers["Retry-After"]) <= 3600 and body["retry_after_s"] == int(refused.headers["Retry-After"])


def test_a_lifetime_cap_says_one_day_and_that_only_a_policy_change_frees_it(tmp_path: Path) -> None:
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}) as client:
        client.put("/v1/admin/privacy-policy", json=_policy())
        assert client.post("/v1/diagnose", json=_body(1, epsilon=2.0)).status_code == 200
        refused = client.post("/v1/diagnose", json=_body(2, epsilon=2.0))
    assert refused.status_code == 429 and refused.headers["Retry-After"] == str(NO_RENEWAL_RETRY_AFTER_S)
    body = refused.json()
    assert body["renews_at"] is None and "does not renew" in body["detail"] and "policy changes" in body["detail"]


def test_a_cohort_report_refused_for_budget_carries_retry_after(tmp_path: Path) -> None:
    students = [{"student_id": f"c{n}", "responses": _body(n)["responses"]} for n in range(10)]
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}, privacy_cap_epsilon=3.0, min_cohort_size=10) as client:
        client.put("/v1/admin/privacy-policy", json=_policy(cap_epsilon=3.0, period={"kind": "rolling", "window_s": 600}))
        request = {"qmatrix_id": Q, "students": students, "epsilon": 2.0}
        assert client.post("/v1/cohort-report", json=request).status_code == 200
        refused = client.post("/v1/cohort-report", json=request)
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 600
    assert refused.json()["detail"][0]["type"] == "privacy_budget"


def test_a_batch_names_each_refused_students_retry_after(tmp_path: Path) -> None:
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}) as client:
        client.put("/v1/admin/privacy-policy", json=_policy(period={"kind": "rolling", "window_s": 600}))
        assert client.post("/v1/diagnose", json=_body(1, student="spent", epsilon=2.0)).status_code == 200
        batch = client.post("/v1/diagnose/batch", json={"qmatrix_id": Q, "epsilon": 1.0, "students": [
            {"student_id": "spent", "responses": _body(2)["responses"]},
            {"student_id": "fresh", "responses": _body(3)["responses"]},
        ]}).json()
    assert batch["count"] == 1 and [e["student_id"] for e in batch["errors"]] == ["spent"]
    assert batch["errors"][0]["status_code"] == 429 and 1 <= batch["errors"][0]["retry_after_s"] <= 600

