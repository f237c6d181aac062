"""The privacy ledger's CPU per diagnosis: one charge and one release, as the gateway awaits them.

Two paths on the same SQLite file settings (WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``), taking turns:

* ``to_thread``: each call in the default executor, one transaction (and one fsync) per call — the async face
  before the group-commit writer;
* ``writer``: :class:`privacy.ledger.AsyncLedger` as it is now (on SQLite: the ledger's writer thread, a batch of
  queued calls in one transaction, one savepoint per call).

CPU is ``time.process_time`` (every thread of this process), divided by the pairs run. Each turn runs on a fresh
temporary file, every pair with its own student (as the bench's diagnoses do). Prints one line per turn and a
median per path and concurrency::

    nice -n 10 .venv/bin/python -m tests.privacy.ledger_cpu --pairs 2000 --concurrency 1 50 --turns 4

It lives beside the ledger's tests, not in ``bench/``: bench drives the gateway over HTTP and may not import
``privacy`` (tests/test_exports.py). No test runs it (no test asserts a time).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from privacy.ledger import AsyncLedger, Charge, PrivacyLedger, StudentKey
from privacy.mechanisms import ReleaseCost
from privacy.registry import PAPER_MECHANISM

COST = ReleaseCost(epsilon=0.1, delta=0.0, mechanism=PAPER_MECHANISM)  # a diagnosis's default
ANSWER = '{"mastery": [0.42, 0.58, 0.61], "entities": 3}'
Pair = Callable[[int], Awaitable[None]]


def _pairs(ledger: PrivacyLedger, path: str) -> Pair:
    face = AsyncLedger(ledger)

    async def writer(i: int) -> None:
        charge = await face.charge(tenant="bench", student=StudentKey(f"s{i}"), cost=COST,
                                   request_fingerprint=f"f{i}", releases=3, source="bench")
        await face.release(charge, ANSWER)

    async def to_thread(i: int) -> None:
        charge: Charge = await asyncio.to_thread(
            ledger.charge, tenant="bench", student=StudentKey(f"s{i}"), cost=COST, request_fingerprint=f"f{i}",
            releases=3, source="bench",
        )
        await asyncio.to_thread(ledger.release, charge, ANSWER)

    return writer if path == "writer" else to_thread


async def _turn(path: str, pairs: int, concurrency: int) -> tuple[float, float]:
    """CPU µs per pair and pairs per second, on a fresh ledger file."""
    with tempfile.TemporaryDirectory() as folder:
        ledger = PrivacyLedger(Path(folder) / "ledger.db", cap_epsilon=1e9)
        try:
            run = _pairs(ledger, path)
            await run(-1)  # warm: tables, prepared statements, the writer thread
            next_i = 0

            async def client() -> None:
                nonlocal next_i
                while next_i < pairs:
                    i, next_i = next_i, next_i + 1
                    await run(i)

            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(client() for _ in range(concurrency)))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            ledger.close()
    return cpu / pairs * 1e6, pairs / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 50])
    parser.add_argument("--turns", type=int, default=4, help="turns per path, alternating A B B A …")
    args = parser.parse_args()
    for concurrency in args.concurrency:
        cpu: dict[str, list[float]] = {"to_thread": [], "writer": []}
        rate: dict[str, list[float]] = {"to_thread": [], "writer": []}
        for turn in range(args.turns):
            for path in ("to_thread", "writer") if turn % 2 == 0 else ("writer", "to_thread"):
                us, per_s = asyncio.run(_turn(path, args.pairs, concurrency))
                cpu[path].append(us)
                rate[path].append(per_s)
                print(f"c={concurrency} turn {turn} {path:9s} {us:7.0f} µs CPU/pair {per_s:7.0f} pairs/s", flush=True)
        before, after = statistics.median(cpu["to_thread"]), statistics.median(cpu["writer"])
        turns = {path: f"{min(values):.0f}-{max(values):.0f}" for path, values in cpu.items()}
        print(f"c={concurrency} median: to_thread {before:.0f} µs, writer {after:.0f} µs CPU/pair "
              f"(writer/to_thread {after / before:.2f}; turns {turns['writer']} vs {turns['to_thread']}); "
              f"pairs/s {statistics.median(rate['to_thread']):.0f} → {statistics.median(rate['writer']):.0f}",
              flush=True)


if __name__ == "__main__":
    main()
