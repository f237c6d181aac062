"""ASGI middleware: request body limits (413), the one access-log line per request, and the request
latency histogram (``app.metrics``).

Both are plain ASGI classes (no per-request task or threadpool hop).
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
import time
from collections.abc import Callable

from fastapi import HTTPException, status
from fastapi.routing import APIRoute
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth import Principal
from app.metrics import HTTP_REQUESTS

__all__ = ["AccessLog", "BodyLimit", "RequestMetrics"]

access_log = logging.getLogger("fedcd.access")


class BodyLimit:
    """Refuse bodies over ``limit_for(method, path)`` bytes with 413, by Content-Length or while streaming."""

    def __init__(self, app: ASGIApp, *, limit_for: Callable[[str, str], int]) -> None:
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        message = f"request body over {limit} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit:
                    await _send_json(send, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, {"detail": message})
                    return
        received = 0

        async def limited() -> Message:
            nonlocal received
            msg = await receive()
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                if received > limit:
                    raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, detail=message)
            return msg

        await self.app(scope, limited, send)


class _AfterEachRequest(ABC):
    """Runs the app, then ``observe``s the request: its status code and seconds taken (status 500
    when the app raised before answering)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        response = _StatusOf(send)
        try:
            await self.app(scope, receive, response)
        finally:
            self.observe(scope, response.status, time.perf_counter() - start)

    @abstractmethod
    def observe(self, scope: Scope, status_code: int, seconds: float) -> None: ...


class AccessLog(_AfterEachRequest):
    """One INFO line per request: method, route *template* (never raw ids), status, milliseconds, tenant, key id."""

    def observe(self, scope: Scope, status_code: int, seconds: float) -> None:
        if access_log.isEnabledFor(logging.INFO):
            principal = scope.get("state", {}).get("principal")
            who = (principal.tenant, principal.key_id) if isinstance(principal, Principal) else ("-", "-")
            access_log.info(
                "%s %s %d %.1fms tenant=%s key=%s", scope["method"], route_template(scope), status_code, seconds * 1000,
                *who,
            )


class RequestMetrics(_AfterEachRequest):
    """Observes every HTTP request's latency, by method, route *template* and status code."""

    def observe(self, scope: Scope, status_code: int, seconds: float) -> None:
        HTTP_REQUESTS.labels(scope["method"], route_template(scope), str(status_code)).observe(seconds)


class _StatusOf:
    """A ``send`` that remembers the response's status code (500 if the app raised before answering)."""

    def __init__(self, send: Send) -> None:
        self._send, self.status = send, 500

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self._send(message)


def route_template(scope: Scope) -> str:
    """The matched route's path template (``/v1/privacy/students/{student_id}``), never the raw path;
    ``<unmatched>`` when no route matched."""
    route = scope.get("route")
    if isinstance(route, APIRoute):
        return route.path
    endpoint = scope.get("endpoint")  # a plain Starlette route (/docs) sets only its endpoint
    if endpoint is not None:
        for candidate in scope["app"].router.routes:
            if isinstance(candidate, Route) and candidate.endpoint is endpoint:
                return candidate.path
    return "<unmatched>"


async def _send_json(send: Send, status_code: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    await send({
        "type": "http.response.start", "status": status_code,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
    })
    await send({"type": "http.response.body", "body": payload})
