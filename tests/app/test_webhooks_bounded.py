"""A webhook receiver cannot hold the gateway's memory or a delivery: its answer's body is never read (only the
status), and each attempt has one overall deadline (``webhook_timeout_s``), whatever the receiver trickles."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from app.webhooks import WebhookSender, WebhookTarget

TARGET = {"t": WebhookTarget(url="https://tenant.example/hook", secret="s" * 16)}  # type: ignore[arg-type]


class Endless(httpx.AsyncByteStream):
    """A body of ``chunks`` MiB, counting what was read of it."""

    def __init__(self, chunks: int) -> None:
        self.chunks, self.sent = chunks, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            self.sent += 1
            yield b"x" * (1 << 20)


async def _deliver(sender: WebhookSender) -> bool:
    task = sender.job_finished({"tenant": "t", "job_id": "j", "status": "succeeded"})
    assert task is not None
    delivered = await task
    await sender.aclose()
    return delivered


def test_the_receivers_body_is_never_read() -> None:
    stream = Endless(64)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=stream))
    sender = WebhookSender(TARGET, attempts=1, transport=transport)
    assert asyncio.run(_deliver(sender)) is True
    assert stream.sent == 0


def test_a_receiver_that_never_answers_fails_the_attempt_at_its_deadline() -> None:
    calls = []

    async def stalled(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers["x-fedcd-delivery"])
        await asyncio.Event().wait()  # never answers (no per-operation timeout applies to it)
        raise AssertionError("unreachable")

    sender = WebhookSender(TARGET, attempts=2, backoff_s=0.01, timeout_s=0.05, transport=httpx.MockTransport(stalled))
    # (the outer bound only keeps a regression from hanging the suite; nothing here measures time)
    assert asyncio.run(asyncio.wait_for(_deliver(sender), 120)) is False  # both attempts cut off, retried once
    assert len(calls) == 2 and len(set(calls)) == 1
