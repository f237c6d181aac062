"""ASGI middleware: request body limits (413) and the one access-log line per request.

Both are plain ASGI classes (no per-request task or threadpool hop).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from fastapi import HTTPException, status
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth import Principal

__all__ = ["AccessLog", "BodyLimit"]

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


class AccessLog:
    """One INFO line per request: method, route *template* (never raw ids), status, milliseconds, tenant, key id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status_code = 500

        async def record(message: Message) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            if access_log.isEnabledFor(logging.INFO):
                route = scope.get("route")
                template = route.path if isinstance(route, APIRoute) else "<unmatched>"
                principal = scope.get("state", {}).get("principal")
                who = (principal.tenant, principal.key_id) if isinstance(principal, Principal) else ("-", "-")
                access_log.info(
                    "%s %s %d %.1fms tenant=%s key=%s", scope["method"], template, status_code,
                    (time.perf_counter() - start) * 1000, *who,
                )


async def _send_json(send: Send, status_code: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    await send({
        "type": "http.response.start", "status": status_code,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
    })
    await send({"type": "http.response.body", "body": payload})
