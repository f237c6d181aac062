"""A scriptable local HTTP server speaking the OpenAI, Groq and Anthropic wire protocols.

Tests drive the *real* official SDKs (openai, groq, anthropic) through our adapters and
swap the server instead of patching SDK internals. The server listens on 127.0.0.1 on a
free port, answers each request with the next scripted ``Behaviour`` from a queue, and
records every request so tests can assert on exactly what the SDK put on the wire.

Routes (the SDKs' own paths, checked against their sources):

* ``POST /v1/chat/completions``         openai SDK, ``base_url=f"{server.url}/v1"``
* ``POST /openai/v1/chat/completions``  groq SDK, ``base_url=server.url`` (groq appends the prefix)
* ``POST /v1/messages``                 anthropic SDK, ``base_url=server.url``

It is stdlib-only (``ThreadingHTTPServer`` in a daemon thread) so it starts and stops in
milliseconds and cannot leak an event loop into the async tests that use it.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

__all__ = [
    "ANTHROPIC_PATH",
    "GROQ_PATH",
    "OPENAI_PATH",
    "Behaviour",
    "CutOff",
    "Delay",
    "EchoCredentials",
    "RawBody",
    "RecordedRequest",
    "Reset",
    "Status",
    "Success",
    "WireServer",
    "bad_request",
    "malformed_body",
    "rate_limited",
    "server_error",
    "success",
]

OPENAI_PATH = "/v1/chat/completions"
GROQ_PATH = "/openai/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"

WireProtocol = Literal["openai", "anthropic"]
_ROUTES: dict[str, WireProtocol] = {OPENAI_PATH: "openai", GROQ_PATH: "openai", ANTHROPIC_PATH: "anthropic"}


# --- scripted behaviours ---------------------------------------------------------------


@dataclass(frozen=True)
class Success:
    """HTTP 200 with a well-formed completion whose message text is ``content`` (any text, valid JSON or not)."""

    content: str
    prompt_tokens: int = 42
    completion_tokens: int = 7


@dataclass(frozen=True)
class Status:
    """An HTTP error in the protocol's error envelope, with optional extra headers (e.g. Retry-After)."""

    code: int
    message: str = "scripted error"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RawBody:
    """A reply whose body is sent verbatim (e.g. truncated JSON) under the given content type."""

    body: bytes
    code: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (longer than the client's timeout), then behave as ``then``.

    The wait is cut short when the server closes, so a timed-out request never holds up
    the end of a test.
    """

    seconds: float
    then: Behaviour


@dataclass(frozen=True)
class Reset:
    """Read the request, then abort the connection with a TCP reset: no reply at all."""


@dataclass(frozen=True)
class CutOff:
    """Start a well-formed 200 reply carrying ``content``, then close the socket, as a crashing server does.

    ``body_bytes=0`` closes right after the headers; otherwise after that many bytes of the body
    (the headers promise the whole body's Content-Length).
    """

    content: str = "{}"
    body_bytes: int = 0


@dataclass(frozen=True)
class EchoCredentials:
    """An HTTP error whose message quotes the request's credential headers, as a misconfigured proxy might."""

    code: int = 401


Behaviour = Success | Status | RawBody | Delay | Reset | CutOff | EchoCredentials


def success(content: str | dict[str, Any]) -> Success:
    """A 200 whose message text is ``content`` (a dict is JSON-encoded, a string is sent as is)."""
    return Success(json.dumps(content) if isinstance(content, dict) else content)


def rate_limited(retry_after: float | str = 2) -> Status:
    return Status(429, "rate limited", headers=(("Retry-After", str(retry_after)),))


def server_error(code: int = 500) -> Status:
    return Status(code, "internal error")


def bad_request() -> Status:
    return Status(400, "invalid request")


def malformed_body() -> RawBody:
    """A 200 that claims JSON but is cut off mid-object (a proxy or a crashed upstream)."""
    return RawBody(b'{"id": "chatcmpl-1", "choices": [{"message": {"content": ')


# --- recording ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    json: Any = None  # the decoded body, or None if it was not JSON

    @property
    def text(self) -> str:
        """Every prompt text the request carried, joined (for 'appears in the prompt' checks)."""
        if not isinstance(self.json, dict):
            return ""
        parts: list[str] = []
        system = self.json.get("system")
        if isinstance(system, str):
            parts.append(system)
        for message in self.json.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(block.get("text", "")) for block in content if isinstance(block, dict))
        return "\n".join(parts)


# --- protocol rendering ----------------------------------------------------------------


def _success_body(protocol: WireProtocol, behaviour: Success, model: str) -> dict[str, Any]:
    if protocol == "anthropic":
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": behaviour.content}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": behaviour.prompt_tokens, "output_tokens": behaviour.completion_tokens},
        }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": behaviour.content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": behaviour.prompt_tokens,
            "completion_tokens": behaviour.completion_tokens,
            "total_tokens": behaviour.prompt_tokens + behaviour.completion_tokens,
        },
    }


_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}


def _error_body(protocol: WireProtocol, status: Status) -> dict[str, Any]:
    if protocol == "anthropic":
        kind = _ANTHROPIC_ERROR_TYPES.get(status.code, "api_error")
        return {"type": "error", "error": {"type": kind, "message": status.message}}
    return {"error": {"message": status.message, "type": "server_error", "code": status.code}}


# --- the server ------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keep-alive like the real APIs; every reply carries Content-Length.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, delayed ACKs add ~40 ms per request.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean; failures are asserted on the recorded requests

    def do_GET(self) -> None:
        self._send_json(404, {"error": {"message": f"no GET route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            decoded: Any = json.loads(body) if body else None
        except ValueError:
            decoded = None
        wire = self.server.wire
        wire._record(
            RecordedRequest(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                json=decoded,
            )
        )
        protocol = _ROUTES.get(self.path.split("?", 1)[0])
        if protocol is None:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        model = decoded.get("model", "") if isinstance(decoded, dict) else ""
        self._perform(wire._next(), protocol, model)

    def _perform(self, behaviour: Behaviour, protocol: WireProtocol, model: str) -> None:
        while isinstance(behaviour, Delay):
            if self.server.wire._closing.wait(behaviour.seconds):
                self.close_connection = True  # shutting down: drop the request unanswered
                return
            behaviour = behaviour.then
        if isinstance(behaviour, Success):
            self._send_json(200, _success_body(protocol, behaviour, model))
        elif isinstance(behaviour, Status):
            self._send_json(behaviour.code, _error_body(protocol, behaviour), extra=behaviour.headers)
        elif isinstance(behaviour, RawBody):
            self._send(behaviour.code, behaviour.body, behaviour.content_type)
        elif isinstance(behaviour, EchoCredentials):
            echoed = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "x-api-key")}
            status = Status(behaviour.code, f"invalid credentials; request headers were {echoed}")
            self._send_json(behaviour.code, _error_body(protocol, status))
        elif isinstance(behaviour, Reset):
            # SO_LINGER with a zero timeout turns close() into an RST instead of an orderly FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
        else:
            self._cut_off(behaviour, protocol, model)

    def _cut_off(self, behaviour: CutOff, protocol: WireProtocol, model: str) -> None:
        body = json.dumps(_success_body(protocol, Success(behaviour.content), model)).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: min(behaviour.body_bytes, len(body) - 1)])
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True  # the server closes the socket with the body incomplete

    def _send_json(self, code: int, payload: Any, *, extra: tuple[tuple[str, str], ...] = ()) -> None:
        self._send(code, json.dumps(payload).encode(), "application/json", extra=extra)

    def _send(self, code: int, body: bytes, content_type: str, *, extra: tuple[tuple[str, str], ...] = ()) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout fired) before we answered: expected in timeout tests.
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a handler stuck on a half-open keep-alive socket must not block close()
    wire: WireServer


@dataclass
class WireServer:
    """Scriptable server. Use as a context manager, or call ``start()``/``close()``.

    ``script(*behaviours)`` queues replies, consumed one per request in order; when the
    queue is empty the ``fallback`` answers (by default a 500 naming the problem, so an
    unexpected extra request fails loudly rather than hanging).
    """

    host: str = "127.0.0.1"
    fallback: Behaviour = field(default_factory=lambda: Status(500, "wire server: no scripted reply left"))
    requests: list[RecordedRequest] = field(default_factory=list, init=False)
    _queue: deque[Behaviour] = field(default_factory=deque, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _closing: threading.Event = field(default_factory=threading.Event, init=False)
    _httpd: _Server | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    # lifecycle
    def start(self) -> Self:
        httpd = _Server((self.host, 0), _Handler)  # port 0: the OS picks a free port
        httpd.wire = self
        self._httpd = httpd
        # A short poll interval makes close() (shutdown) return within ~10 ms, per test.
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # release handlers waiting in a Delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # scripting
    def script(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def _next(self) -> Behaviour:
        with self._lock:
            return self._queue.popleft() if self._queue else self.fallback

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]
