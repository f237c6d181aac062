"""The bench's load generator (bench/load.py) against a scripted loopback server: every request sent once, the
key on each, errors counted rather than hidden, connections kept alive per worker."""

from __future__ import annotations

import asyncio
import json

from bench.load import Measured, _load


async def _serve_and_load(n: int, concurrency: int) -> tuple[dict[str, list], Measured]:
    seen: dict[str, list] = {"connections": [], "bodies": [], "keys": [], "lines": []}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"].append(1)
        try:
            while True:
                try:
                    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in head[1:] if x)}
                body = json.loads(await reader.readexactly(int(headers["content-length"])))
                seen["bodies"].append(body["k"])
                seen["lines"].append(head[0])
                seen["keys"].append(headers.get("authorization"))
                status = b"200 OK" if body["k"] % 2 == 0 else b"503 Busy"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        measured = await _load(lambda k: (f"http://127.0.0.1:{port}/v1/diagnose?x=1", {"k": k}), n=n,
                               concurrency=concurrency, api_key="secret", max_seconds=30)
    finally:
        server.close()
        await server.wait_closed()
    return seen, measured


def test_each_request_is_sent_once_with_the_key_and_non_2xx_counts_as_an_error() -> None:
    seen, measured = asyncio.run(_serve_and_load(n=20, concurrency=3))
    assert sorted(seen["bodies"]) == list(range(20))
    assert set(seen["keys"]) == {"Bearer secret"}
    assert (measured.ok, measured.errors) == (10, 10)
    assert len(measured.latencies) == 10
    assert set(seen["lines"]) == {"POST /v1/diagnose?x=1 HTTP/1.1"}
    assert len(seen["connections"]) == 3  # one kept-alive connection per worker, errors included


def test_a_server_that_is_not_there_gives_errors_not_an_exception() -> None:
    async def run() -> Measured:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await _load(lambda k: (f"http://127.0.0.1:{port}/", {}), n=4, concurrency=2, api_key="k",
                           max_seconds=30)

    measured = asyncio.run(run())
    assert (measured.ok, measured.errors) == (0, 4)
