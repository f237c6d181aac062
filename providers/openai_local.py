"""A thin path to a *local* OpenAI-compatible server (vLLM, llama.cpp server, Ollama, LM Studio on ``http://``).

``fedcd bench gateway --profile`` (docs/results/gateway-issue36) found a third of the gateway's CPU per diagnosis in
the official openai SDK and its HTTP client: per call about 1.4 ms of request options, header models, retry and
auth layers and the client's own middleware, for one JSON POST to a server on the same machine or network; this
path does the same POST in about 0.1 ms. It is used only for ``openai_compatible`` entities with a plain-HTTP base URL
(``providers.factory``): hosted providers (``https://``, and every ``openai``, ``groq`` and ``anthropic`` entity)
are still called through their official SDKs.

It is an adapter like the others (``ChatCompletionsEntity``: the same request body, the same strict reply parsing)
and raises the same error tree with the same messages as ``providers.sdk_errors`` does for the SDK path, so the
wrappers (retries, deadline, concurrency, circuit breaker) and the fault tests see no difference.

The client speaks HTTP/1.1 with keep-alive, one request per connection at a time, replies parsed by ``httptools``
(uvicorn's C parser; fixed-length and chunked bodies): idle connections are reused, and one that the server closed
while idle is replaced by a fresh one before a request is sent on it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies_environment, proxy_bypass_environment

import httptools

from providers.config import EntitySpec
from providers.errors import EntityError, EntityParseError, EntityRejected, EntityTimeout, EntityUnavailable
from providers.openai_chat import ChatCompletionsEntity
from providers.sdk_errors import parse_retry_after

__all__ = ["LocalChatClient", "LocalOpenAIChatEntity", "uses_thin_path"]

_RETRYABLE_STATUS = {408, 409, 429}  # as providers.sdk_errors: these and every 5xx are worth another attempt
_MAX_IDLE = 64  # idle connections kept per server; more than the gateway's usual calls in flight to one entity


def uses_thin_path(spec: EntitySpec, http_client: Any) -> bool:
    """An ``openai_compatible`` entity on plain HTTP (a local server), with no HTTP client injected (tests that
    inject one speak to the SDK) and no HTTP proxy configured for its host (the thin client speaks to the server
    directly; the SDK's client honours ``HTTP_PROXY``/``NO_PROXY`` as before)."""
    base_url = spec.base_url or ""
    if spec.kind != "openai_compatible" or http_client is not None or not base_url.startswith("http://"):
        return False
    proxies = getproxies_environment()
    host = urlsplit(base_url).hostname or ""
    return not (("http" in proxies or "all" in proxies) and not proxy_bypass_environment(host, proxies))


class _Reply:
    """httptools' callbacks for one response: status, lower-cased headers, body, whether it is complete."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.received = 0
        self.complete = self.keep_alive = self.headers_done = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True

    @property
    def ends_at_close(self) -> bool:
        """A body with neither a length nor chunks (HTTP/1.0 style): it ends when the server closes."""
        return self.headers_done and "content-length" not in self.headers and \
            "chunked" not in self.headers.get("transfer-encoding", "").lower()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.received += len(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # read here: the parser forgets it once reset


class LocalChatClient:
    """POSTs JSON to one ``http://`` origin over kept-alive connections; ``post`` returns the reply's body."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout_s: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the thin client speaks plain HTTP to a local server, not {base_url!r}")
        if api_key is not None and not api_key.isprintable():  # no CR/LF: the key goes into a header line
            raise ValueError("the API key holds control characters")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        host_header = parts.netloc.rpartition("@")[2]
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (f"Host: {host_header}\r\nUser-Agent: fedcd\r\nAccept: application/json\r\n"
                      f"Content-Type: application/json\r\n{auth}").encode("latin-1")
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self, path: str, body: dict[str, Any]) -> bytes:
        """The 2xx reply's body; an ``EntityError`` (without the entity's name) for anything else."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._head
                   + f"Content-Length: {len(payload)}\r\n\r\n".encode("latin-1") + payload)
        try:
            async with asyncio.timeout(self.timeout_s):
                status, reply = await self._exchange(request)
        except TimeoutError:
            raise EntityTimeout("request timed out") from None
        if 200 <= status < 300:
            return b"".join(reply.body)
        text = b"".join(reply.body)[:2000].decode("utf-8", "replace")
        message = f"HTTP {status}: {text}"
        if status in _RETRYABLE_STATUS or status >= 500:
            raise EntityUnavailable(message, retry_after=parse_retry_after(reply.headers), status_code=status)
        raise EntityRejected(message, status_code=status)

    async def _exchange(self, request: bytes) -> tuple[int, _Reply]:
        """Send on an idle connection (or a new one) and read the whole reply. A reused connection that the server
        closed before answering a byte is replaced once by a fresh one (it closed while idle, not on this request)."""
        while self._idle:
            reader, writer = self._idle.pop()
            if reader.at_eof() or writer.is_closing():
                writer.close()
                continue
            outcome = await self._on(reader, writer, request, reused=True)
            if outcome is not None:
                return outcome
            break
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError as exc:
            raise EntityUnavailable(f"connection failed: {type(exc).__name__}: {exc}") from None
        outcome = await self._on(reader, writer, request, reused=False)
        assert outcome is not None  # a fresh connection never asks for another
        return outcome

    async def _on(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, *, reused: bool
    ) -> tuple[int, _Reply] | None:
        reply, kept = _Reply(), False
        parser = reply.parser
        try:
            writer.write(request)
            await writer.drain()
            seen = 0
            while not reply.complete:
                data = await reader.read(65536)
                if not data:
                    if reused and seen == 0:
                        return None  # closed while idle: the caller retries on a fresh connection
                    if reply.ends_at_close:
                        break  # the whole body: it was delimited by the close
                    expected = reply.headers.get("content-length", "?")
                    raise EntityUnavailable(f"connection failed: the server closed the connection mid-reply "
                                            f"(received {reply.received} bytes, expected {expected})")
                seen += len(data)
                parser.feed_data(data)
            kept = reply.keep_alive and len(self._idle) < _MAX_IDLE
            return parser.get_status_code(), reply
        except EntityError:
            raise
        except httptools.HttpParserError as exc:
            raise EntityUnavailable(f"connection failed: malformed HTTP reply ({type(exc).__name__})") from None
        except OSError as exc:
            if reused and not reply.headers and not reply.received:
                return None
            raise EntityUnavailable(f"connection failed: {type(exc).__name__}: {exc}") from None
        finally:  # cancelled, failed or a server that closes: never back in the pool mid-reply
            if kept:
                self._idle.append((reader, writer))
            else:
                writer.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()


class LocalOpenAIChatEntity(ChatCompletionsEntity):
    """An ``openai_compatible`` entity on a plain-HTTP (local) server, through :class:`LocalChatClient`."""

    path = "/chat/completions"

    def __init__(self, spec: EntitySpec, *, api_key: str | None) -> None:
        assert spec.base_url is not None  # guaranteed by EntitySpec validation for openai_compatible
        super().__init__(spec, LocalChatClient(spec.base_url, api_key=api_key, timeout_s=spec.timeout_s))

    async def _post(self, body: dict[str, Any]) -> bytes:
        return await self.client.post(self.path, body)

    def _errors(self) -> Any:
        return _mapped_errors(self.name)


@contextmanager
def _mapped_errors(entity: str) -> Iterator[None]:
    """As ``map_sdk_errors`` for the SDK path: errors tagged with the entity, a ``ValueError`` from parsing the
    reply an ``EntityParseError``."""
    try:
        yield
    except EntityError as exc:
        exc.entity = exc.entity or entity
        raise
    except ValueError as exc:
        raise EntityParseError(f"malformed response: {exc}", entity=entity) from None
