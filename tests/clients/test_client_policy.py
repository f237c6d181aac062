"""The client's policy against a fake server (httpx.MockTransport): retries and the two 429s, typed errors,
pagination, job waiting, auth. Sleep and clock are injected: no test sleeps or reads the wall clock."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fedcd_client import (
    AsyncFedcdClient,
    AuthenticationError,
    ConflictError,
    FedcdClient,
    FedcdConnectionError,
    InvalidRequestError,
    JobFailedError,
    NotFoundError,
    PermissionDeniedError,
    PrivacyBudgetExceeded,
    RateLimitError,
    RetryPolicy,
    ServiceUnavailableError,
    WaitTimeoutError,
)

Handler = Callable[[httpx.Request], httpx.Response]
DIAGNOSIS = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}
ANSWER = {"student_id": "s1", "mastery": {"add": 0.7}, "calibration_id": None, "request_id": "r1", "latency_ms": 3.0,
          "privacy": {"mechanism": "piecewise", "epsilon": 32.0, "sensitivity": 1.0, "noise_scale": 0.1,
                      "sensitivity_mode": "assessed"}}
RATE_LIMITED = {"detail": "over the rate", "type": "rate_limit", "retry_after_s": 2}
BUDGET_SPENT = {"detail": "spent", "type": "privacy_budget", "renews_at": "2026-12-04T00:00:00Z", "retry_after_s": 3600}


def _job(status: str, done: int = 0, total: int = 10, **extra: Any) -> dict[str, Any]:
    return {"job_id": "j1", "kind": "calibrate", "status": status, "created_at": "t0", "updated_at": "t1",
            "progress": {"done": done, "total": total, "failed_entities": {}}, **extra}


def _scripted(answers: list[httpx.Response], seen: list[httpx.Request]) -> Handler:
    """A server that gives ``answers`` in order and records each request."""
    replies: Iterator[httpx.Response] = iter(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(replies)

    return handle


def _client(handler: Handler, *, sleeps: list[float] | None = None, **kwargs: Any) -> FedcdClient:
    kwargs.setdefault("sleep", (sleeps if sleeps is not None else []).append)
    http = httpx.Client(transport=httpx.MockTransport(handler))
    return FedcdClient("http://gateway.test", api_key="fcd_test", http_client=http, **kwargs)


def test_a_rate_limit_429_is_retried_after_its_retry_after() -> None:
    # Prepare: two rate-limit refusals, then the answer
    seen: list[httpx.Request] = []
    sleeps: list[float] = []
    handler = _scripted([httpx.Response(429, json=RATE_LIMITED, headers={"Retry-After": "2"}),
                         httpx.Response(429, json=RATE_LIMITED, headers={"Retry-After": "1"}),
                         httpx.Response(200, json=ANSWER)], seen)

    # Execute
    answer = _client(handler, sleeps=sleeps).diagnose(DIAGNOSIS)

    # Assert: the waits are the server's, and the same body was sent each time
    assert answer.mastery == {"add": 0.7} and sleeps == [2.0, 1.0] and len(seen) == 3
    assert len({r.content for r in seen}) == 1


def test_a_privacy_budget_429_is_never_retried() -> None:
    seen: list[httpx.Request] = []
    sleeps: list[float] = []
    handler = _scripted([httpx.Response(429, json=BUDGET_SPENT, headers={"Retry-After": "3600"})], seen)

    with pytest.raises(PrivacyBudgetExceeded) as caught:
        _client(handler, sleeps=sleeps, retry=RetryPolicy(max_wait_s=10_000)).diagnose(DIAGNOSIS)

    # Even a Retry-After the policy would wait out is not: the budget is the caller's to know about
    assert len(seen) == 1 and sleeps == []
    assert caught.value.renews_at == "2026-12-04T00:00:00Z" and caught.value.retry_after_s == 3600
    assert not isinstance(caught.value, RateLimitError)


def test_a_retry_after_longer_than_the_policy_waits_is_raised_at_once() -> None:
    seen: list[httpx.Request] = []
    sleeps: list[float] = []
    handler = _scripted([httpx.Response(429, json=RATE_LIMITED, headers={"Retry-After": "600"})], seen)

    with pytest.raises(RateLimitError) as caught:
        _client(handler, sleeps=sleeps, retry=RetryPolicy(max_wait_s=30)).usage()

    assert sleeps == [] and len(seen) == 1 and caught.value.retry_after_s == 600


def test_retries_stop_after_max_retries_with_the_last_error() -> None:
    sleeps: list[float] = []

    def always_limited(_: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json=RATE_LIMITED, headers={"Retry-After": "1"})

    with pytest.raises(RateLimitError):
        _client(always_limited, sleeps=sleeps, retry=RetryPolicy(max_retries=2)).usage()
    assert sleeps == [1.0, 1.0]


def test_503_is_retried_only_when_the_server_says_when() -> None:
    # "try later" carries Retry-After; every entity failing does not (asking again costs entity calls)
    sleeps: list[float] = []
    seen: list[httpx.Request] = []
    later = _scripted([httpx.Response(503, json={"detail": "starting"}, headers={"Retry-After": "5"}),
                       httpx.Response(200, json=ANSWER)], seen)
    assert _client(later, sleeps=sleeps).diagnose(DIAGNOSIS).request_id == "r1" and sleeps == [5.0]

    failed = {"detail": "no entity answered", "entities": [{"name": "gpt", "status": "failed", "reason": "timeout"}]}
    seen.clear()
    with pytest.raises(ServiceUnavailableError) as caught:
        _client(_scripted([httpx.Response(503, json=failed)], seen), sleeps=sleeps).diagnose(DIAGNOSIS)
    assert len(seen) == 1 and caught.value.entities[0]["name"] == "gpt"


def test_connection_errors_are_retried_but_a_sent_post_is_not_resent() -> None:
    calls: list[str] = []

    def refuse_then_answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=ANSWER)

    sleeps: list[float] = []
    assert _client(refuse_then_answer, sleeps=sleeps).diagnose(DIAGNOSIS).request_id == "r1"
    assert calls == ["POST", "POST"] and sleeps == [0.5]

    def read_timeout(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        raise httpx.ReadTimeout("slow", request=request)

    calls.clear()
    with pytest.raises(FedcdConnectionError):  # may have been diagnosed (and charged): not sent twice
        _client(read_timeout).diagnose(DIAGNOSIS)
    assert calls == ["POST"]
    calls.clear()
    with pytest.raises(FedcdConnectionError):  # a GET is safe to repeat
        _client(read_timeout, retry=RetryPolicy(max_retries=2)).jobs.get("j1")
    assert calls == ["GET", "GET", "GET"]


@pytest.mark.parametrize("status,error", [
    (401, AuthenticationError), (403, PermissionDeniedError), (404, NotFoundError), (409, ConflictError),
    (422, InvalidRequestError),
])
def test_error_statuses_are_typed(status: int, error: type[Exception]) -> None:
    body = {"detail": [{"loc": ["body", "responses", 0, "item_id"], "msg": "unknown item", "type": "value_error"}]}
    with pytest.raises(error) as caught:
        _client(lambda _: httpx.Response(status, json=body)).diagnose(DIAGNOSIS)
    assert "body.responses.0.item_id: unknown item" in str(caught.value)
    if isinstance(caught.value, InvalidRequestError):
        assert caught.value.errors[0]["loc"][-1] == "item_id"


def test_requests_carry_the_key_and_only_the_fields_set() -> None:
    seen: list[httpx.Request] = []
    _client(_scripted([httpx.Response(200, json=ANSWER)], seen)).diagnose(DIAGNOSIS)
    request = seen[0]
    assert request.headers["authorization"] == "Bearer fcd_test"
    assert request.url == "http://gateway.test/v1/diagnose"
    assert json.loads(request.content) == DIAGNOSIS  # no defaults or nulls the caller did not send


def test_a_misspelt_request_field_fails_before_sending() -> None:
    seen: list[httpx.Request] = []
    with pytest.raises(ValueError, match="include_entity"):
        _client(_scripted([], seen)).diagnose({**DIAGNOSIS, "include_entity": True})
    assert seen == []


def test_ids_cannot_change_the_route() -> None:
    seen: list[httpx.Request] = []
    _client(_scripted([httpx.Response(200, json=_job("running"))], seen)).jobs.get("../keys?x=1")
    assert seen[0].url.raw_path == b"/v1/jobs/..%2Fkeys%3Fx%3D1"


def test_iteration_follows_next_cursor_to_the_last_page() -> None:
    pages = {None: {"data": ["a", "b"], "count": 2, "limit": 2, "next_cursor": "c1"},
             "c1": {"data": ["c"], "count": 1, "limit": 2, "next_cursor": None}}
    cursors: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        cursors.append(cursor)
        assert request.url.params["limit"] == "2"
        return httpx.Response(200, json=pages[cursor])

    assert list(_client(handle).qmatrices.iter(page_size=2)) == ["a", "b", "c"]
    assert cursors == [None, "c1"]


def test_job_filters_are_sent_as_repeated_parameters() -> None:
    seen: list[httpx.Request] = []
    page = {"data": [_job("failed")], "count": 1, "limit": 50, "next_cursor": None}
    jobs = list(_client(_scripted([httpx.Response(200, json=page)], seen)).jobs.iter(
        kind=["calibrate"], status=["failed", "cancelled"]))
    assert [j.status for j in jobs] == ["failed"]
    assert seen[0].url.params.multi_items() == [("kind", "calibrate"), ("state", "failed"), ("state", "cancelled")]


def test_wait_reports_each_change_of_progress_and_returns_the_finished_job() -> None:
    states = [_job("queued"), _job("running", 3), _job("running", 3), _job("running", 7), _job("succeeded", 10,
              calibration_id="cal-1")]
    sleeps: list[float] = []
    seen: list[httpx.Request] = []
    reported: list[tuple[str, int]] = []
    client = _client(_scripted([httpx.Response(200, json=s) for s in states], seen), sleeps=sleeps)

    job = client.jobs.wait("j1", poll_s=0.5, on_progress=lambda j: reported.append((j.status, j.progress.done)))

    assert job.calibration_id == "cal-1" and sleeps == [0.5] * 4
    assert reported == [("queued", 0), ("running", 3), ("running", 7), ("succeeded", 10)]  # the repeat is not


def test_wait_raises_for_a_failed_job_and_past_its_timeout() -> None:
    failed = _scripted([httpx.Response(200, json=_job("failed", error="entity down"))], [])
    with pytest.raises(JobFailedError, match="entity down") as caught:
        _client(failed).jobs.wait("j1")
    assert caught.value.job.status == "failed"
    assert _client(_scripted([httpx.Response(200, json=_job("cancelled"))], [])).jobs.wait(
        "j1", raise_on_failure=False).status == "cancelled"

    now = [0.0]  # a fake clock that only the injected sleep moves

    def tick(seconds: float) -> None:
        now[0] += seconds

    running = _client(lambda _: httpx.Response(200, json=_job("running", 1)), sleep=tick, clock=lambda: now[0])
    with pytest.raises(WaitTimeoutError) as timed_out:
        running.jobs.wait("j1", poll_s=2.0, timeout_s=5.0)
    assert timed_out.value.job.progress.done == 1 and now[0] == 4.0  # a third poll would end past the timeout


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCD_BASE_URL", "http://elsewhere.test:9000/")
    monkeypatch.setenv("FEDCD_API_KEY", "fcd_env\n")
    seen: list[httpx.Request] = []
    client = FedcdClient(http_client=httpx.Client(transport=httpx.MockTransport(
        _scripted([httpx.Response(200, json={"status": "ok", "entities": 1, "version": "x"})], seen))))
    client.health()
    assert str(seen[0].url) == "http://elsewhere.test:9000/healthz" and seen[0].headers["authorization"] == "Bearer fcd_env"


def test_retry_policy_refuses_negative_values() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


async def test_the_async_client_retries_a_rate_limit_and_never_a_spent_budget() -> None:
    sleeps: list[float] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    answers = iter([httpx.Response(429, json=RATE_LIMITED, headers={"Retry-After": "3"}),
                    httpx.Response(200, json=ANSWER),
                    httpx.Response(429, json=BUDGET_SPENT, headers={"Retry-After": "3600"})])
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: next(answers)))
    patient = RetryPolicy(max_wait_s=10_000)  # would wait out the budget's Retry-After: it must not
    async with AsyncFedcdClient("http://gateway.test", api_key="k", http_client=http, sleep=record,
                                retry=patient) as client:
        assert (await client.diagnose(DIAGNOSIS)).request_id == "r1"
        with pytest.raises(PrivacyBudgetExceeded):
            await client.diagnose(DIAGNOSIS)
    assert sleeps == [3.0]
    await http.aclose()
