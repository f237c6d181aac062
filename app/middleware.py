"""ASGI middleware: request body limits (413), and after each request its one access-log line and its latency in
the request histogram (``app.metrics``).

Both are plain ASGI classes (no per-request task or threadpool hop).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from fastapi import HTTPException, status
from fastapi.routing import APIRoute
from prometheus_client import Histogram
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth import Principal
from app.metrics import HTTP_REQUESTS

__all__ = ["BodyLimit", "ObservedRequests"]

access_log = logging.getLogger("fedcd.access")
_MAX_CACHED_LABELS = 1024
# The method label takes these values and "other": any token is a valid HTTP method, so a client (no key needed)
# inventing one per request would otherwise add a metric series per request, without limit.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


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


class ObservedRequests:
    """After each HTTP request, its access-log line and its latency in ``app.metrics.HTTP_REQUESTS``, both from one
    timing and one ``send`` wrapper (status 500 when the app raised before answering; the line and the observation
    come in a ``finally``, so a request that failed inside the app is logged and counted too).

    One class, not one per concern: the profile (docs/results/gateway-issue36) put each after-request middleware's
    wrapping, timing and route lookup on every diagnosis, twice.

    The access line: method, route *template* (never raw ids), status, milliseconds, tenant, key id.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The histogram's child per (method, route, status): ``labels()`` checks, stringifies and locks on every
        # call; the child it returns for a label set never changes, so it is looked up once. Bounded like the
        # labels themselves (an invented method is "other"), and capped all the same.
        self._latency: dict[tuple[str, str, int], Histogram] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        response = _StatusOf(send)
        try:
            await self.app(scope, receive, response)
        finally:
            seconds = time.perf_counter() - start
            route = route_template(scope)
            self._observe(scope["method"], route, response.status, seconds)
            if access_log.isEnabledFor(logging.INFO):
                principal = scope.get("state", {}).get("principal")
                who = (principal.tenant, principal.key_id) if isinstance(principal, Principal) else ("-", "-")
                access_log.info("%s %s %d %.1fms tenant=%s key=%s", scope["method"], route, response.status,
                                seconds * 1000, *who)

    def _observe(self, method: str, route: str, status_code: int, seconds: float) -> None:
        method = method if method in _METHODS else "other"
        key = (method, route, status_code)
        child = self._latency.get(key)
        if child is None:
            child = HTTP_REQUESTS.labels(method, route, str(status_code))
            if len(self._latency) < _MAX_CACHED_LABELS:
                self._latency[key] = child
        child.observe(seconds)


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
