"""``fedcd bench healthz``: how long ``/healthz`` takes while large Q-matrix uploads run beside it.

A responsiveness claim ("the gateway stays answerable during the heaviest uploads the limits allow") is a
measurement of a machine, not a unit-test assertion: on a busy 2-core host any fixed bound fails for reasons
that are not the code's. So it is measured here and reported as percentiles, with the machine's load.

Real processes on loopback: the gateway (``fedcd serve``, its own process, one SIMULATED entity: no model
loads, no provider is called) and this process, which

1. probes ``/healthz`` ``idle_probes`` times, one at a time, with no upload running (the baseline);
2. uploads ``uploads`` Q-matrix CSVs of ``items`` × ``concepts`` (``POST /v1/qmatrices?id=...``, text/csv),
   ``concurrency`` at once, and probes ``/healthz`` one at a time for as long as any upload is in flight.

Everything is bounded: the counts above and ``max_seconds`` for the loaded phase (uploads still running then
are abandoned and reported). Measured: each probe's latency (a kept-alive connection, as a load balancer's
health check uses), its status, and the uploads' statuses and times, the gateway's peak resident memory, and
the load average before and after.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.processes import ROOT, Processes, free_port, wait_http
from bench.provenance import loadavg, revision
from bench.stats import percentile

__all__ = ["HealthzBenchConfig", "latency_summary", "run_healthz_bench", "write_healthz_report"]


@dataclass(frozen=True)
class HealthzBenchConfig:
    items: int = 16_000  # 16,000 items x 500 concepts: a CSV just under the 16 MiB upload limit (README "Limits")
    concepts: int = 500
    uploads: int = 8
    concurrency: int = 2
    idle_probes: int = 200
    max_seconds: float = 300.0  # the loaded phase's bound
    probe_timeout_s: float = 30.0
    workers: int = 1
    seed: int = 0


def latency_summary(seconds: Sequence[float], errors: int = 0) -> dict[str, Any]:
    """Count, errors, and p50/p95/p99/max in milliseconds (nearest rank; ``None`` when nothing was measured)."""
    def ms(value: float) -> float | None:
        return None if math.isnan(value) else round(value * 1000, 3)

    return {"probes": len(seconds), "errors": errors,
            "p50_ms": ms(percentile(seconds, 0.50)), "p95_ms": ms(percentile(seconds, 0.95)),
            "p99_ms": ms(percentile(seconds, 0.99)), "max_ms": ms(max(seconds) if seconds else float("nan"))}


def qmatrix_csv(items: int, concepts: int, seed: int = 0) -> str:
    """A wide Q-matrix CSV: item id, text, one 0/1 column per concept (3 concepts per item, or all if fewer)."""
    rng = random.Random(seed)
    per_item = min(3, concepts)
    rows = []
    for i in range(items):
        chosen = set(rng.sample(range(concepts), per_item))
        rows.append(f"i{i:05d},item text {i:05d}," + ",".join("1" if k in chosen else "0" for k in range(concepts)))
    return "item_id,text," + ",".join(f"c{k:03d}" for k in range(concepts)) + "\n" + "\n".join(rows) + "\n"


class _Peak:
    """The gateway's peak resident memory (its process and children), sampled by the prober."""

    def __init__(self, pid: int) -> None:
        self.process, self.bytes = psutil.Process(pid), 0

    def sample(self) -> None:
        total = 0
        for p in [self.process, *self.process.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        self.bytes = max(self.bytes, total)


def _probe(client: httpx.Client, timeout: float) -> tuple[float, bool]:
    start = time.perf_counter()
    try:
        ok = client.get("/healthz", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        ok = False
    return time.perf_counter() - start, ok





def run_healthz_bench(config: HealthzBenchConfig, *,
                      progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run both phases; returns the results as plain data (:func:`write_healthz_report` writes them)."""
    work = Path(tempfile.mkdtemp(prefix="fedcd-bench-healthz-"))
    procs = Processes(work)
    entities = [{"name": "sim:specialist", "kind": "simulated", "simulated_style": "specialist", "seed": 1}]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDCD_STATE_DIR": str(work / "state"),
           "FEDCD_ENTITIES": json.dumps(entities), "FEDCD_LOCAL_FED": "false", "FEDCD_TRAIN_DEFAULT_MODEL": "false",
           "FEDCD_DEFAULT_CALIBRATION": "false", "FEDCD_PRELOAD_MODELS": "false", "OPENBLAS_NUM_THREADS": "1",
           "FEDCD_RATE_LIMIT": "1000000/second burst 1000000"}  # limiter in the path, never reached
    load_before = loadavg()
    try:
        key = json.loads(subprocess.run(
            [sys.executable, "-m", "app.cli", "keys", "create", "--tenant", "bench", "--role", "admin", "--json"],
            env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
        ).stdout)["api_key"]
        port = free_port()
        gateway = procs.start("gateway", [sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                                          "--workers", str(config.workers)], env)
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz", gateway)
        progress(f"gateway up ({config.workers} worker(s)) on 127.0.0.1:{port}")
        body = qmatrix_csv(config.items, config.concepts, config.seed).encode()
        peak = _Peak(gateway.pid)

        with httpx.Client(base_url=base) as client:
            # Phase 1: idle
            for _ in range(min(5, config.idle_probes)):  # warm-up: connection, first-request imports
                _probe(client, config.probe_timeout_s)
            idle, idle_errors = [], 0
            progress(f"idle: {config.idle_probes} probes")
            for _ in range(config.idle_probes):
                seconds, ok = _probe(client, config.probe_timeout_s)
                if ok:
                    idle.append(seconds)
                else:
                    idle_errors += 1
            peak.sample()
            idle_rss = peak.bytes

            # Phase 2: uploads in flight
            progress(f"loaded: {config.uploads} uploads of {len(body) / 2**20:.1f} MiB, {config.concurrency} at once")
            uploads: list[dict[str, Any]] = []
            lock, todo = threading.Lock(), iter(range(config.uploads))
            deadline = time.monotonic() + config.max_seconds

            def uploader() -> None:
                with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}",
                                                          "content-type": "text/csv"}) as upload_client:
                    for k in todo:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return
                        start = time.perf_counter()
                        try:
                            status = upload_client.post(f"/v1/qmatrices?id=bench-{k:03d}", content=body,
                                                        timeout=left).status_code
                        except httpx.HTTPError as exc:
                            status = type(exc).__name__
                        with lock:
                            uploads.append({"status": status, "seconds": round(time.perf_counter() - start, 3)})

            threads = [threading.Thread(target=uploader, daemon=True, name=f"upload-{n}")
                       for n in range(config.concurrency)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            loaded, loaded_errors = [], 0
            # Each probe starts while an upload thread is alive; the first right after they start.
            while time.monotonic() < deadline and any(t.is_alive() for t in threads):
                seconds, ok = _probe(client, config.probe_timeout_s)
                if ok:
                    loaded.append(seconds)
                else:
                    loaded_errors += 1
                peak.sample()
            loaded_seconds = time.perf_counter() - started
            abandoned = sum(t.is_alive() for t in threads)
        load_after = loadavg()
    finally:
        procs.stop_all()

    statuses: dict[str, int] = {}
    for u in uploads:
        statuses[str(u["status"])] = statuses.get(str(u["status"]), 0) + 1
    times = [u["seconds"] for u in uploads]
    return {
        "config": asdict(config),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_before": load_before,
                    "loadavg_after": load_after},
        "revision": revision(),
        "upload_bytes": len(body),
        "idle": latency_summary(idle, idle_errors),
        "during_uploads": {**latency_summary(loaded, loaded_errors), "seconds": round(loaded_seconds, 3)},
        "uploads": {"sent": len(uploads), "statuses": statuses, "abandoned_threads": abandoned,
                    "p50_s": percentile(times, 0.5) if times else None, "max_s": max(times) if times else None},
        "gateway_rss_mb": {"idle": round(idle_rss / 2**20, 1), "peak": round(peak.bytes / 2**20, 1)},
        "logs": str(work),
    }


def _cell(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def write_healthz_report(data: dict[str, Any], out: Path, *, command: str) -> list[Path]:
    """``results.json`` and ``README.md`` (the table, the command, the machine) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    config, machine, uploads = data["config"], data["machine"], data["uploads"]
    rows = [("no upload running", data["idle"]), ("while uploads are in flight", data["during_uploads"])]
    lines = [
        "# /healthz latency while large Q-matrix uploads run",
        "",
        f"Command: `{command}`, code at {data.get('revision') or 'an unknown revision (not a git checkout)'}.",
        "",
        f"Machine: {machine['cpus']} CPUs, Python {machine['python']}; load average (1, 5, 15 min) "
        f"{machine['loadavg_before']} before, {machine['loadavg_after']} after. The gateway: `fedcd serve`, "
        f"{config['workers']} worker(s), SQLite, one SIMULATED entity, on 127.0.0.1; the probes and uploads come "
        "from one client process on the same machine.",
        "",
        f"Load: {config['uploads']} uploads of a {config['items']:,} × {config['concepts']} Q-matrix CSV "
        f"({data['upload_bytes'] / 2**20:.2f} MiB each), {config['concurrency']} at once; `/healthz` probed one at "
        "a time on a kept-alive connection for as long as any upload was in flight "
        f"(at most {config['max_seconds']:g} s).",
        "",
        "| phase | probes | errors | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|",
        *[f"| {name} | {s['probes']} | {s['errors']} | {_cell(s['p50_ms'])} | {_cell(s['p95_ms'])} | "
          f"{_cell(s['p99_ms'])} | {_cell(s['max_ms'])} |" for name, s in rows],
        "",
        f"Uploads: {uploads['sent']} sent, statuses {uploads['statuses']}, "
        f"{uploads['abandoned_threads']} upload thread(s) still running at the bound; time per upload p50 "
        f"{_cell(uploads['p50_s'], 2)} s, max {_cell(uploads['max_s'], 2)} s; the loaded phase took "
        f"{data['during_uploads']['seconds']:.1f} s. Gateway resident memory: {data['gateway_rss_mb']['idle']} MB "
        f"idle, {data['gateway_rss_mb']['peak']} MB at its peak.",
        "",
        "These are one machine's numbers at one moment: rerun the command to compare (same machine, similar load "
        "average). The test suite asserts no latency (tests/bench/test_healthz_bench.py checks that the bench runs "
        "and reports these percentiles).",
        "",
    ]
    report, results = out / "README.md", out / "results.json"
    report.write_text("\n".join(lines))
    results.write_text(json.dumps({k: v for k, v in data.items() if k != "logs"}, indent=2) + "\n")
    return [results, report]
