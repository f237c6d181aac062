"""A recording TLS proxy in front of a SuperLink: every request a node sends, as the coordinator receives it.

Nodes speak protobuf over HTTPS to the SuperLink (Flower 1.42's Fleet API). The proxy
terminates TLS with the SuperLink's own certificate (the test made the CA), keeps the path
and raw body of every request, and forwards it unchanged to the real SuperLink. What a node
sends therefore reaches the coordinator only through :attr:`RecordingProxy.requests`, which
a test can search for anything that must never leave a node.
"""

from __future__ import annotations

import ssl
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_HOP = {"host", "content-length", "connection", "transfer-encoding", "content-encoding"}


class RecordingProxy:
    """Listens on ``port`` (TLS with ``cert``/``key``) and forwards to ``https://127.0.0.1:<upstream>``."""

    def __init__(self, *, port: int, upstream: int, cert: Path, key: Path, ca: Path) -> None:
        self.port, self.upstream = port, upstream
        self.requests: list[tuple[str, bytes]] = []
        self._client = httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca)), timeout=120.0)
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST", "PUT", "DELETE"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, ssl_certfile=str(cert),
                                                     ssl_keyfile=str(key), log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        self.requests.append((request.url.path, body))
        url = f"https://127.0.0.1:{self.upstream}{request.url.path}"
        if request.url.query:
            url += f"?{request.url.query}"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            upstream = await self._client.request(request.method, url, content=body, headers=headers)
        except httpx.TransportError as exc:  # the SuperLink is not up (yet, or any more): as the node would see it
            return Response(status_code=502, content=str(exc).encode())
        return Response(content=upstream.content, status_code=upstream.status_code,
                        headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP})

    def start(self) -> RecordingProxy:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the recording proxy did not start")
            time.sleep(0.05)
        return self

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
