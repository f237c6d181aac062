"""Signed webhooks when a job finishes: delivered to a real HTTP receiver on 127.0.0.1, signature verified, retried
with backoff after failures, given up after a final refusal, and never holding the job back.

Waits are bounded polls; backoff is 10 ms so retries take no noticeable time; nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app import Settings, create_app
from app.jobs import JobContext, JobRunner
from app.jobs.failures import JobFailed
from app.webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookSender, WebhookTarget, sign, verify
from tests.factories import FakeEntity

SECRET = "s3cret-of-sixteen-chars"


class Receiver:
    """An HTTP server on 127.0.0.1 answering POSTs with ``statuses`` in turn (the last one repeats)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.open = threading.Event()  # cleared: requests wait (a receiver that hangs)
        self.open.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.open.wait(timeout=30)
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/fedcd"

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.open.set()
            self.server.shutdown()
            self.server.server_close()


@asynccontextmanager
async def gateway(tmp_path: Path, webhooks: dict[str, Any], **settings: Any) -> AsyncIterator[Any]:
    config = Settings(state_dir=tmp_path, entities=[], preload_models=False, default_calibration=False, local_fed=False,
                      webhooks=webhooks, webhook_backoff_s=0.01, **settings)  # type: ignore[arg-type]
    app = create_app(config, entities={"a": FakeEntity("a", 0.4)})
    async with app.router.lifespan_context(app):
        yield app.state.gateway


async def _run_job(gateway: Any, *, fail: bool = False, tenant: str = "school") -> tuple[str, asyncio.Task[bool] | None]:
    """Submit one job (a handler of the test's own), wait until it is stored finished; its delivery task."""
    jobs: JobRunner = gateway.jobs
    deliveries: list[asyncio.Task[bool] | None] = []
    assert jobs.on_finish is not None  # the gateway listens: webhooks are configured
    # The same call the gateway wires, keeping the delivery task it returns
    jobs.on_finish = lambda event: deliveries.append(gateway.webhooks.job_finished(event))  # type: ignore[func-returns-value]

    async def handler(request: dict[str, Any], context: JobContext) -> dict[str, Any]:
        if fail:
            raise JobFailed("the job broke")  # a text the code wrote: kept (app.jobs.failures)
        return {"metrics": {"answer": 42}}

    jobs.register("noop", handler)
    job_id = jobs.submit("noop", {}, tenant=tenant)
    for _ in range(2000):  # bounded polls
        if deliveries:
            return job_id, deliveries[0]
        await asyncio.sleep(0.005)
    raise AssertionError("the job did not finish")


def _event(receiver: Receiver, n: int = 0) -> dict[str, Any]:
    return json.loads(receiver.received[n][1])


async def test_a_finished_job_is_posted_signed(tmp_path: Path) -> None:
    with Receiver(200).running() as receiver:
        async with gateway(tmp_path, {"*": {"url": receiver.url, "secret": SECRET}}) as gw:
            job_id, delivery = await _run_job(gw)
            assert delivery is not None and await delivery is True
    assert len(receiver.received) == 1
    headers, body = receiver.received[0]
    assert verify(SECRET, headers[TIMESTAMP_HEADER.lower()], body, headers[SIGNATURE_HEADER.lower()])
    assert headers[SIGNATURE_HEADER.lower()].startswith("sha256=") and headers["x-fedcd-event"] == "job.finished"
    event = _event(receiver)
    assert event["type"] == "job.finished" and event["tenant"] == "school"
    assert event["job"] == {"job_id": job_id, "kind": "noop", "status": "succeeded", "error": None,
                            "calibration_id": None}
    assert event["delivery_id"] == headers[DELIVERY_HEADER.lower()]


async def test_a_failing_receiver_is_retried_until_it_answers(tmp_path: Path) -> None:
    with Receiver(500, 503, 200).running() as receiver:
        async with gateway(tmp_path, {"*": {"url": receiver.url, "secret": SECRET}}, webhook_attempts=5) as gw:
            _, delivery = await _run_job(gw, fail=True)
            assert delivery is not None and await delivery is True
    assert len(receiver.received) == 3
    assert len({h[DELIVERY_HEADER.lower()] for h, _ in receiver.received}) == 1  # one event, three attempts
    for headers, body in receiver.received:
        assert verify(SECRET, headers[TIMESTAMP_HEADER.lower()], body, headers[SIGNATURE_HEADER.lower()])
    event = _event(receiver, 2)
    assert event["job"]["status"] == "failed" and "the job broke" in event["job"]["error"]


async def test_retries_stop_after_the_attempts_and_at_a_final_refusal(tmp_path: Path) -> None:
    with Receiver(500).running() as down, Receiver(400, 200).running() as refusing:
        async with gateway(tmp_path / "down", {"*": {"url": down.url, "secret": SECRET}}, webhook_attempts=3) as gw:
            _, delivery = await _run_job(gw)
            assert delivery is not None and await delivery is False
        async with gateway(tmp_path / "refusing", {"*": {"url": refusing.url, "secret": SECRET}}) as gw:
            _, delivery = await _run_job(gw)
            assert delivery is not None and await delivery is False
    assert len(down.received) == 3 and len(refusing.received) == 1  # a 400 is not retried


async def test_a_hanging_receiver_never_holds_the_job(tmp_path: Path) -> None:
    with Receiver(200).running() as receiver:
        receiver.open.clear()  # the receiver takes the request and does not answer
        async with gateway(tmp_path, {"*": {"url": receiver.url, "secret": SECRET}}) as gw:
            job_id, delivery = await _run_job(gw)
            # the job is stored finished, and the runner is free, while its delivery still waits
            assert delivery is not None and not delivery.done()
            row = gw.jobs.get(job_id, tenant="school")
            assert row.status == "succeeded" and json.loads(row.metrics_json) == {"answer": 42}
            assert not gw.jobs._tasks  # noqa: SLF001 (the runner holds no task for it)
            receiver.open.set()
            assert await delivery is True


async def test_only_tenants_with_a_target_are_posted_to(tmp_path: Path) -> None:
    with Receiver(200).running() as receiver:
        async with gateway(tmp_path, {"school": {"url": receiver.url, "secret": SECRET}}) as gw:
            _, delivery = await _run_job(gw, tenant="elsewhere")
            assert delivery is None
            _, delivery = await _run_job(gw, tenant="school")
            assert delivery is not None and await delivery is True
    assert [_event(receiver)["tenant"]] == ["school"]


async def test_no_webhooks_configured_no_listener(tmp_path: Path) -> None:
    async with gateway(tmp_path, {}) as gw:
        assert gw.jobs.on_finish is None


@pytest.mark.parametrize("target", [
    {"url": "file:///etc/passwd", "secret": SECRET},
    {"url": "ftp://example.org/x", "secret": SECRET},
    {"url": "https://example.org/x", "secret": "short"},
    {"url": "https://example.org/x", "secret": SECRET, "verify": False},
])
def test_only_http_urls_and_real_secrets_are_accepted(tmp_path: Path, target: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Settings(state_dir=tmp_path, webhooks={"*": target})  # type: ignore[arg-type]


def test_the_signature_covers_the_body_and_the_time() -> None:
    body, now = b'{"type":"job.finished"}', time.time()
    stamp = str(int(now))
    signature = sign(SECRET, stamp, body)
    assert verify(SECRET, stamp, body, signature, now=now)
    assert not verify(SECRET, stamp, body + b" ", signature, now=now)  # another body
    assert not verify("another-secret-of-16", stamp, body, signature, now=now)
    assert not verify(SECRET, stamp, body, signature, now=now + 3600)  # replayed an hour later
    assert not verify(SECRET, "yesterday", body, signature, now=now)


def test_a_tenant_without_its_own_target_gets_the_default() -> None:
    own, default = (WebhookTarget(url=f"https://{h}.example/h", secret=SECRET) for h in ("own", "all"))  # type: ignore[arg-type]
    sender = WebhookSender({"school": own, "*": default})
    assert sender.target_for("school") is own and sender.target_for("other") is default
    assert WebhookSender({"school": own}).target_for("other") is None
