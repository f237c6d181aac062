"""The thin path to a local OpenAI-compatible server (``providers.openai_local``): which entities take it, and its
HTTP/1.1 client against a raw server (kept-alive connections reused, a connection the server closed while idle
replaced without sending the request twice, chunked replies). Its failures are the fault tests' (test_faults.py,
``openai_compatible``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
import pytest_asyncio

from providers.config import EntitySpec
from providers.factory import build_adapter
from providers.openai_chat import OpenAIChatEntity
from providers.openai_local import LocalChatClient, LocalOpenAIChatEntity, uses_thin_path
from providers.types import PromptContext

COMPLETION = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "{}"}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


def _spec(kind: str, base_url: str) -> EntitySpec:
    return EntitySpec(name="e", kind=kind, model="m", base_url=base_url, api_key="k")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind,base_url,thin", [
    ("openai_compatible", "http://127.0.0.1:8000/v1", True),  # a local server
    ("openai_compatible", "https://api.example.com/v1", False),  # a hosted one: its SDK
    ("openai", "http://127.0.0.1:8000/v1", False),  # OpenAI itself: always the SDK
])
def test_only_a_plain_http_openai_compatible_entity_takes_the_thin_path(kind: str, base_url: str, thin: bool) -> None:
    adapter = build_adapter(_spec(kind, base_url))
    assert isinstance(adapter, LocalOpenAIChatEntity) == thin
    assert isinstance(adapter, OpenAIChatEntity) == (not thin)


def test_an_injected_http_client_keeps_the_sdk_path() -> None:
    spec = _spec("openai_compatible", "http://127.0.0.1:8000/v1")
    assert not uses_thin_path(spec, httpx.AsyncClient())


def test_a_configured_http_proxy_keeps_the_sdk_path_unless_the_host_bypasses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spec("openai_compatible", "http://10.0.0.7:8000/v1")
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert not uses_thin_path(spec, None)  # the SDK honours the proxy, as before
    monkeypatch.setenv("NO_PROXY", "10.0.0.7")
    assert uses_thin_path(spec, None)


class RawServer:
    """Answers every POST with ``reply(n)`` (the n-th request's raw response bytes); counts connections and
    requests; ``close_after_reply`` closes each connection after answering without saying so."""

    def __init__(self, reply: Callable[[int], bytes], *, close_after_reply: bool = False) -> None:
        self.reply, self.close_after_reply = reply, close_after_reply
        self.connections = self.requests = 0
        self.bodies: list[dict] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                self.bodies.append(json.loads(await reader.readexactly(length)))
                self.requests += 1
                writer.write(self.reply(self.requests))
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def _ok(body: bytes, *, chunked: bool = False) -> bytes:
    if chunked:
        half = len(body) // 2
        parts = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half], body[half:]))
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + parts + \
            b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest_asyncio.fixture
async def serve() -> AsyncIterator[Callable[[RawServer], asyncio.Future[str]]]:
    servers: list[asyncio.base_events.Server] = []

    async def start(raw: RawServer) -> str:
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()


async def test_sequential_calls_reuse_one_kept_alive_connection(serve, prompt_context: PromptContext) -> None:
    content = json.dumps({c: 0.5 for c in prompt_context.concepts})
    completion = {**COMPLETION, "choices": [{"message": {"role": "assistant", "content": content}}]}
    raw = RawServer(lambda _n: _ok(json.dumps(completion).encode()))
    entity = LocalOpenAIChatEntity(_spec("openai_compatible", await serve(raw)), api_key="k")

    answers = [await entity.respond(prompt_context) for _ in range(3)]
    await entity.aclose()

    assert raw.requests == 3 and raw.connections == 1
    assert all(a.usage.prompt_tokens == 3 and a.model == "m" and a.status == "ok" for a in answers)
    assert raw.bodies[0]["model"] == "m" and raw.bodies[0]["messages"]  # the chat-completions body


async def test_a_connection_closed_while_idle_is_replaced_and_nothing_is_sent_twice(
    serve, prompt_context: PromptContext
) -> None:
    raw = RawServer(lambda _n: _ok(json.dumps(COMPLETION).encode()), close_after_reply=True)
    client = LocalChatClient(await serve(raw), api_key=None, timeout_s=5.0)

    first = await client.post("/chat/completions", {"n": 1})
    await asyncio.sleep(0.05)  # the server's close reaches the idle connection
    second = await client.post("/chat/completions", {"n": 2})
    await client.close()

    assert json.loads(first) == json.loads(second) == COMPLETION
    assert raw.requests == 2 and raw.connections == 2 and [b["n"] for b in raw.bodies] == [1, 2]


async def test_a_chunked_reply_is_read_whole(serve) -> None:
    body = json.dumps(COMPLETION).encode()
    raw = RawServer(lambda _n: _ok(body, chunked=True))
    client = LocalChatClient(await serve(raw), api_key="k", timeout_s=5.0)

    assert await client.post("/chat/completions", {}) == body
    assert await client.post("/chat/completions", {}) == body  # and the connection is still usable
    await client.close()
    assert raw.connections == 1


async def test_a_body_delimited_by_the_close_is_read_whole(serve) -> None:
    body = json.dumps(COMPLETION).encode()
    http10 = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body  # no length: ends at the close
    raw = RawServer(lambda _n: http10, close_after_reply=True)
    client = LocalChatClient(await serve(raw), api_key="k", timeout_s=5.0)

    assert await client.post("/chat/completions", {}) == body
    await client.close()


def test_a_key_that_would_break_the_header_line_is_refused() -> None:
    with pytest.raises(ValueError, match="control characters"):
        LocalChatClient("http://127.0.0.1:1/v1", api_key="k\r\nX-Injected: 1", timeout_s=1.0)
