"""Bounded load against one server and what it cost that server: the measuring half of ``fedcd bench gateway``.

A scenario may be measured in several chunks (``Measured.add``), so servers can take turns on it (see
``bench.gateway``): latencies, counts, wall time and the server's CPU simply add up over the chunks, and each
chunk is also kept as a turn (its own CPU per request, throughput and the machine's load), so a report can give the
median over turns and their spread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import psutil

from bench.provenance import loadavg
from bench.stats import percentile
from providers.errors import EntityError
from providers.openai_local import LocalChatClient

__all__ = ["Measured", "RequestMaker", "ScenarioResult", "Target", "measure", "scenario_result"]

# k -> (url, JSON body) of the k-th request of a scenario
RequestMaker = Callable[[int], tuple[str, dict[str, Any]]]


@dataclass
class ScenarioResult:
    name: str
    target: str  # fedcd | fedcd@<revision> | litellm | sdk | sdk-official
    requests: int
    concurrency: int
    seconds: float
    ok: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    added_p50_ms: float  # over the stub's latency (each entity call overlaps: one stub latency per request)
    throughput_rps: float
    cpu_ms_per_request: float
    per: str = "diagnosis"  # what one request is: diagnosis | batch of N | call
    notes: list[str] = field(default_factory=list)
    # One entry per turn (chunk) of the scenario, in order: cpu_ms_per_request, throughput_rps, load1 (the
    # machine's 1-minute load average as the turn started). Empty for rows not measured in turns.
    turns: list[dict[str, float | None]] = field(default_factory=list)
    # The rest of the machine's CPU per request meanwhile: the upstream stubs the server called (all of them, with
    # their children) and this load generator itself. None where not read (in-process rows).
    upstream_cpu_ms_per_request: float | None = None
    client_cpu_ms_per_request: float | None = None


@dataclass(frozen=True)
class Target:
    """The server a scenario loads: its label in the report, the process whose CPU is measured, and the bearer key
    every request carries."""

    label: str
    pid: int
    api_key: str


@dataclass
class Measured:
    """What one scenario (or some chunks of it) measured on one target."""

    latencies: list[float] = field(default_factory=list)
    ok: int = 0
    errors: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    load1: float | None = None  # the machine's 1-minute load average when this chunk started
    upstream_cpu_s: float = 0.0  # the upstream processes' CPU meanwhile (the stubs)
    client_cpu_s: float = 0.0  # this load generator's own CPU meanwhile
    chunks: list[Measured] = field(default_factory=list)  # what add() was given, one per turn

    def add(self, other: Measured) -> None:
        self.latencies += other.latencies
        self.ok, self.errors = self.ok + other.ok, self.errors + other.errors
        self.wall_s, self.cpu_s = self.wall_s + other.wall_s, self.cpu_s + other.cpu_s
        self.upstream_cpu_s += other.upstream_cpu_s
        self.client_cpu_s += other.client_cpu_s
        self.chunks.append(other)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its children (uvicorn workers)."""
    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


async def _load(
    make: RequestMaker, *, n: int, concurrency: int, api_key: str, max_seconds: float
) -> Measured:
    """Send ``n`` requests, at most ``concurrency`` at once and for at most ``max_seconds``.

    Through the gateway's own thin HTTP/1.1 client (:class:`providers.openai_local.LocalChatClient`: keep-alive
    connections, httptools' parser), one per worker and server, not httpx's async client: on a 2-core machine the
    load generator shares the cores with the server it measures, and through httpx it spent about 7 ms of CPU per
    fedcd diagnosis at c=50, more than the gateway (docs/results/gateway-issue36/machine-cpu). Both servers of a
    comparison are loaded through the same client, so a ratio of their throughputs compares the servers. A reply
    other than a 2xx, or none, counts as an error, never retried (only a kept-alive connection that the server
    closed before answering a byte is replaced once by a fresh one, as for the gateway's own calls)."""
    measured = Measured()
    next_index = iter(range(n))
    stop_at = time.monotonic() + max_seconds

    async def worker() -> None:
        clients: dict[str, LocalChatClient] = {}  # origin -> this worker's client (one connection kept alive)
        try:
            for k in next_index:
                if time.monotonic() > stop_at:
                    return
                url, body = make(k)
                origin, path = _origin_and_path(url)
                client = clients.get(origin) or clients.setdefault(
                    origin, LocalChatClient(origin, api_key=api_key, timeout_s=60.0))
                start = time.perf_counter()
                try:
                    await client.post(path, body)  # raises for anything but a 2xx
                    ok = True
                except EntityError:
                    ok = False
                if ok:
                    measured.latencies.append(time.perf_counter() - start)
                    measured.ok += 1
                else:
                    measured.errors += 1
        finally:
            for client in clients.values():
                await client.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    measured.wall_s = time.perf_counter() - start
    return measured


def _origin_and_path(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _own_cpu_seconds() -> float:
    """User + system CPU of this process alone (every thread; not its children: the servers and stubs)."""
    t = psutil.Process().cpu_times()
    return t.user + t.system


def measure(
    target: Target, make: RequestMaker, *, n: int, concurrency: int, max_seconds: float, upstream: Sequence[int] = (),
) -> Measured:
    """Load ``target`` with ``n`` requests and read what its process tree spent meanwhile; also what the
    ``upstream`` processes (the stubs it calls) and this load generator spent, so a report can say where the
    machine's CPU went (on a shared machine a server's throughput is bounded by all of them)."""
    load1 = _load1()
    before = _cpu_seconds(target.pid)
    upstream_before = sum(_cpu_seconds(pid) for pid in upstream)
    client_before = _own_cpu_seconds()
    measured = asyncio.run(_load(make, n=n, concurrency=concurrency, api_key=target.api_key, max_seconds=max_seconds))
    measured.cpu_s = _cpu_seconds(target.pid) - before
    measured.upstream_cpu_s = sum(_cpu_seconds(pid) for pid in upstream) - upstream_before
    measured.client_cpu_s = _own_cpu_seconds() - client_before
    measured.load1 = load1
    return measured


def _load1() -> float | None:
    load = loadavg()
    return load[0] if load else None


def scenario_result(
    target: Target, name: str, measured: Measured, *, concurrency: int, stub_latency_ms: float,
    per: str = "diagnosis", per_request_units: int = 1, notes: list[str] | None = None,
) -> ScenarioResult:
    p50 = percentile(measured.latencies, 0.5) * 1000
    wall = measured.wall_s
    return ScenarioResult(
        name=name, target=target.label, requests=measured.ok + measured.errors, concurrency=concurrency, seconds=wall,
        ok=measured.ok, errors=measured.errors, p50_ms=p50, p90_ms=percentile(measured.latencies, 0.9) * 1000,
        p99_ms=percentile(measured.latencies, 0.99) * 1000, added_p50_ms=p50 - stub_latency_ms,
        throughput_rps=measured.ok / wall if wall > 0 else 0.0,
        cpu_ms_per_request=measured.cpu_s * 1000 / max(1, measured.ok * per_request_units), per=per,
        notes=notes or [],
        turns=[{"cpu_ms_per_request": c.cpu_s * 1000 / max(1, c.ok * per_request_units),
                "throughput_rps": c.ok / c.wall_s if c.wall_s > 0 else 0.0, "load1": c.load1,
                "upstream_cpu_ms_per_request": c.upstream_cpu_s * 1000 / max(1, c.ok),
                "client_cpu_ms_per_request": c.client_cpu_s * 1000 / max(1, c.ok)}
               for c in measured.chunks] if len(measured.chunks) > 1 else [],
        upstream_cpu_ms_per_request=measured.upstream_cpu_s * 1000 / max(1, measured.ok),
        client_cpu_ms_per_request=measured.client_cpu_s * 1000 / max(1, measured.ok),
    )
