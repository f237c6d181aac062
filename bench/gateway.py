"""``fedcd bench gateway``: what one diagnosis costs the gateway, against fixed-latency stub providers.

Real processes on loopback: N stub OpenAI-compatible servers (``bench.stub``, fixed latency), the gateway
(``fedcd serve``, its own process, with the chosen workers, ledger and database), and a load generator (this
process, bounded in count and time). Measured per scenario: latency percentiles, latency added over the
stub's, throughput, and the gateway's CPU per diagnosis (the process tree's user+system time, from psutil).
Optionally LiteLLM's proxy runs against the same stub, measured the same way, per single pass-through call.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.processes import ROOT, Processes, free_port, wait_http
from bench.profiling import BenchSetupError, Profile, py_spy_command, start_profile
from bench.provenance import checkout, loadavg, revision
from bench.stats import percentile

__all__ = ["GatewayBenchConfig", "ScenarioResult", "run_gateway_bench"]

EXAMPLE_ITEMS = ["q01", "q02", "q03", "q04", "q05", "q06", "q07", "q08", "q09", "q10", "q11", "q12"]


@dataclass(frozen=True)
class GatewayBenchConfig:
    entities: int = 3
    stub_latency_ms: float = 50.0
    workers: int = 1
    ledger: bool = True
    database_url: str | None = None  # None: SQLite in a temporary state folder
    requests_c1: int = 200
    requests_cmax: int = 1000
    concurrency: int = 50
    batches: int = 20
    batch_size: int = 20
    repeats: int = 200
    big_items: int = 2000
    sdk_calls: int = 300
    max_seconds: float = 120.0  # per scenario
    compare_litellm: bool = False
    litellm_command: str | None = None  # default: `litellm` on PATH
    profile: bool = False  # py-spy (if installed) samples the gateway during the concurrency-1 scenario
    baseline: str | None = None  # a git revision: its gateway runs the same scenarios in the same run, for ratios
    seed: int = 0


@dataclass
class ScenarioResult:
    name: str
    target: str  # fedcd | litellm | sdk
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
    make: Callable[[int], tuple[str, dict[str, Any]]], *, n: int, concurrency: int, headers: dict[str, str],
    max_seconds: float,
) -> tuple[list[float], int, int, float]:
    """Send ``n`` requests (``make(k)`` → (url, json)), at most ``concurrency`` at once and for at most
    ``max_seconds``: (latencies of successes, ok, errors, wall seconds)."""
    latencies: list[float] = []
    counts = {"ok": 0, "errors": 0}
    next_index = iter(range(n))
    stop_at = time.monotonic() + max_seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=60.0, limits=limits) as client:
        async def worker() -> None:
            for k in next_index:
                if time.monotonic() > stop_at:
                    return
                url, body = make(k)
                start = time.perf_counter()
                try:
                    r = await client.post(url, json=body)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - start)
                    counts["ok"] += 1
                else:
                    counts["errors"] += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return latencies, counts["ok"], counts["errors"], wall


@dataclass(frozen=True)
class _Target:
    """The server a scenario loads: its label in the report, the process whose CPU is measured, the headers every
    request carries, and the bench's configuration (time limit, stub latency)."""

    label: str
    pid: int
    headers: dict[str, str]
    config: GatewayBenchConfig


def _scenario(
    target: _Target, name: str, make: Callable[[int], tuple[str, dict[str, Any]]], *, n: int, concurrency: int,
    per: str = "diagnosis", per_request_units: int = 1, notes: list[str] | None = None,
) -> ScenarioResult:
    config = target.config
    before = _cpu_seconds(target.pid)
    latencies, ok, errors, wall = asyncio.run(
        _load(make, n=n, concurrency=concurrency, headers=target.headers, max_seconds=config.max_seconds)
    )
    cpu = _cpu_seconds(target.pid) - before
    stub = config.stub_latency_ms
    p50 = percentile(latencies, 0.5) * 1000
    return ScenarioResult(
        name=name, target=target.label, requests=ok + errors, concurrency=concurrency, seconds=wall, ok=ok, errors=errors,
        p50_ms=p50, p90_ms=percentile(latencies, 0.9) * 1000, p99_ms=percentile(latencies, 0.99) * 1000,
        added_p50_ms=p50 - stub, throughput_rps=ok / wall if wall > 0 else 0.0,
        cpu_ms_per_request=cpu * 1000 / max(1, ok * per_request_units), per=per, notes=notes or [],
    )


def _responses(rng: random.Random, items: Sequence[str]) -> list[dict[str, Any]]:
    return [{"item_id": i, "correct": rng.random() < 0.5} for i in rng.sample(list(items), rng.randint(3, 6))]


def _big_qmatrix_csv(n_items: int, n_concepts: int = 20) -> str:
    rng = random.Random(1)
    rows = []
    for i in range(n_items):
        chosen = set(rng.sample(range(n_concepts), 2))
        rows.append(f"b{i:05d},item {i}," + ",".join("1" if k in chosen else "0" for k in range(n_concepts)))
    return "item_id,text," + ",".join(f"skill{k:02d}" for k in range(n_concepts)) + "\n" + "\n".join(rows) + "\n"


def _fedcd_env(config: GatewayBenchConfig, state: Path, stub_urls: Sequence[str], root: Path) -> dict[str, str]:
    entities = [
        {"name": f"e{k}", "kind": "openai_compatible", "base_url": f"{stub_urls[k % len(stub_urls)]}/v1",
         "model": "stub", "api_key": "bench", "max_attempts": 1, "structured_output": "json_schema"}
        for k in range(config.entities)
    ]
    env = {**os.environ, "PYTHONPATH": str(root), "FEDCD_STATE_DIR": str(state), "FEDCD_ENTITIES": json.dumps(entities),
           "FEDCD_LOCAL_FED": "false", "FEDCD_DEFAULT_CALIBRATION": "false", "FEDCD_PRELOAD_MODELS": "false",
           # The rate limiter stays in the measured path, at a rate the load never reaches (README "Rate limits").
           "FEDCD_RATE_LIMIT": "1000000/second burst 1000000",
           "FEDCD_PRIVACY_PERIOD": "lifetime", "FEDCD_PRIVACY_CAP_EPSILON": "1e7" if config.ledger else "null",
           "OPENBLAS_NUM_THREADS": "1"}
    if config.database_url:
        env["FEDCD_DATABASE_URL"] = config.database_url
    return env


def _sdk_per_call(stub_url: str, config: GatewayBenchConfig) -> ScenarioResult:
    """What the official SDK path costs per entity call, measured in a separate process (``bench.sdk_probe``)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.sdk_probe", "--base-url", f"{stub_url}/v1", "--calls", str(config.sdk_calls)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300, check=True,
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return ScenarioResult(
        name="one entity call (the adapter and its SDK, in-process)", target="sdk", requests=probe["calls"],
        concurrency=1, seconds=probe["seconds"], ok=probe["calls"], errors=0, p50_ms=probe["p50_ms"],
        p90_ms=probe["p90_ms"], p99_ms=probe["p99_ms"], added_p50_ms=probe["p50_ms"] - config.stub_latency_ms,
        throughput_rps=probe["calls"] / probe["seconds"], cpu_ms_per_request=probe["cpu_ms_per_call"], per="call",
        notes=[f"{probe['adapter']}; SDK {probe['sdk']}"],
    )


def _litellm_command(config: GatewayBenchConfig) -> str:
    command = shutil.which(config.litellm_command or "litellm")
    if command is None:
        raise BenchSetupError(f"--compare-litellm: no `{config.litellm_command or 'litellm'}` command found "
                              "(install LiteLLM's proxy: `make litellm`)")
    return command


def _litellm(config: GatewayBenchConfig, stub_url: str, procs: Processes, work: Path) -> list[ScenarioResult]:
    command = _litellm_command(config)
    cfg = work / "litellm.yaml"
    master_key = f"sk-bench-{secrets.token_hex(16)}"  # authenticated like fedcd's requests are
    cfg.write_text(json.dumps({"model_list": [{"model_name": "stub", "litellm_params": {
        "model": "openai/stub", "api_base": f"{stub_url}/v1", "api_key": "bench"}}],
        "litellm_settings": {"telemetry": False}, "general_settings": {"master_key": master_key}}))
    port = free_port()
    env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"}
    proc = procs.start("litellm", [command, "--config", str(cfg), "--port", str(port), "--host", "127.0.0.1",
                                   "--num_workers", str(config.workers)], env)
    wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, 180)
    schema = {"type": "object", "properties": {c: {"type": "number"} for c in ("fractions", "equations")}}
    body = {"model": "stub", "messages": [{"role": "user", "content": "mastery?"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "mastery", "schema": schema}}}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    results = []
    litellm = _Target("litellm", proc.pid, {"Authorization": f"Bearer {master_key}"}, config)
    for concurrency, n in ((1, config.requests_c1), (config.concurrency, config.requests_cmax)):
        results.append(_scenario(
            litellm, f"one pass-through call, c={concurrency}", lambda k: (url, body), n=n, concurrency=concurrency,
            per="call",
        ))
    return results


@dataclass
class _CheckoutRun:
    results: list[ScenarioResult]
    profile: str | None


def _fedcd_scenarios(
    root: Path, label: str, config: GatewayBenchConfig, stub_urls: Sequence[str], procs: Processes, work: Path,
    rng: random.Random, progress: Callable[[str], None],
) -> _CheckoutRun:
    """Start the gateway of the checkout at ``root`` and run every fedcd scenario against it; stop it after."""
    results: list[ScenarioResult] = []
    profile_text = None
    env = _fedcd_env(config, work / f"state-{label}", stub_urls, root)
    key = json.loads(subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "create", "--tenant", "bench", "--role", "admin", "--json"],
        env=env, cwd=root, capture_output=True, text=True, check=True, timeout=120,
    ).stdout)["api_key"]
    headers = {"Authorization": f"Bearer {key}"}
    port = free_port()
    gateway = procs.start(f"gateway-{label}", [sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                                               "--workers", str(config.workers)], env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", gateway)
    progress(f"{label}: gateway up ({config.workers} worker(s), ledger {'on' if config.ledger else 'off'})")
    r = httpx.post(f"{base}/v1/qmatrices?id=bank", content=_big_qmatrix_csv(config.big_items),
                   headers={**headers, "content-type": "text/csv"}, timeout=120)
    r.raise_for_status()
    bank_items = [f"b{i:05d}" for i in range(config.big_items)]

    def single(qid: str, items: Sequence[str]) -> Callable[[int], tuple[str, dict[str, Any]]]:
        def make(k: int) -> tuple[str, dict[str, Any]]:
            return f"{base}/v1/diagnose", {"student_id": f"s{k}-{rng.random():.9f}", "qmatrix_id": qid,
                                            "responses": _responses(rng, items)}
        return make

    # Warm-up (imports, connection pools, caches), not measured.
    target = _Target(label, gateway.pid, headers, config)
    _scenario(target, "warm-up", single("example-prealgebra", EXAMPLE_ITEMS), n=30, concurrency=4)
    profile: Profile | None = start_profile(gateway.pid, work, procs.start) if config.profile else None
    for name, qid, items, n, concurrency in (
        ("diagnosis, 12-item Q-matrix, c=1", "example-prealgebra", EXAMPLE_ITEMS, config.requests_c1, 1),
        (f"diagnosis, 12-item Q-matrix, c={config.concurrency}", "example-prealgebra", EXAMPLE_ITEMS,
         config.requests_cmax, config.concurrency),
        (f"diagnosis, {config.big_items}-item Q-matrix, c=1", "bank", bank_items, config.requests_c1, 1),
    ):
        progress(f"{label}: {name}")
        results.append(_scenario(target, name, single(qid, items), n=n, concurrency=concurrency))
        if profile is not None:
            profile_text = profile.stop()
            profile = None
    repeat_body = {"student_id": "repeat-student", "qmatrix_id": "example-prealgebra",
                   "responses": _responses(random.Random(7), EXAMPLE_ITEMS)}
    httpx.post(f"{base}/v1/diagnose", json=repeat_body, headers=headers, timeout=60).raise_for_status()
    progress(f"{label}: repeat path")
    results.append(_scenario(target, "identical request again (repeat path), c=1",
                             lambda k: (f"{base}/v1/diagnose", repeat_body), n=config.repeats, concurrency=1,
                             notes=["answered from the stored answer: no entity call"]))

    def batch(k: int) -> tuple[str, dict[str, Any]]:
        students = [{"student_id": f"b{k}-{j}-{rng.random():.9f}", "responses": _responses(rng, EXAMPLE_ITEMS)}
                    for j in range(config.batch_size)]
        return f"{base}/v1/diagnose/batch", {"qmatrix_id": "example-prealgebra", "students": students}

    progress(f"{label}: batch")
    results.append(_scenario(target, f"batch of {config.batch_size} students, c=1", batch,
                             n=config.batches, concurrency=1, per=f"student (batches of {config.batch_size})",
                             per_request_units=config.batch_size))
    gateway.terminate()
    gateway.wait(timeout=30)
    return _CheckoutRun(results, profile_text)


def run_gateway_bench(config: GatewayBenchConfig, *, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run every scenario; returns the results as plain data (``bench.report`` writes them)."""
    # Missing tools are reported before minutes of measuring, not after.
    if config.compare_litellm:
        _litellm_command(config)
    if config.profile and py_spy_command() is None:
        raise BenchSetupError("--profile needs py-spy: pip install -e '.[bench]'")
    work = Path(tempfile.mkdtemp(prefix="fedcd-bench-"))
    procs = Processes(work)
    load_before = loadavg()
    results: list[ScenarioResult] = []
    profile_text = None
    try:
        stub_urls = []
        for k in range(config.entities):
            port = free_port()
            stub = procs.start(f"stub{k}", [sys.executable, "-m", "bench.stub", "--port", str(port),
                                             "--latency-ms", str(config.stub_latency_ms)],
                               {**os.environ, "PYTHONPATH": str(ROOT)})
            wait_http(f"http://127.0.0.1:{port}/healthz", stub)
            stub_urls.append(f"http://127.0.0.1:{port}")
        progress(f"{len(stub_urls)} stub providers at {config.stub_latency_ms:g} ms")
        # One generator for both checkouts: they get different students (a repeat of another's student would
        # measure the repeat path), from the same distribution of responses.
        rng = random.Random(config.seed)
        current = _fedcd_scenarios(ROOT, "fedcd", config, stub_urls, procs, work, rng, progress)
        results += current.results
        profile_text = current.profile
        if config.baseline:
            root = checkout(config.baseline, work / "baseline")
            progress(f"baseline: the gateway at {config.baseline}")
            results += _fedcd_scenarios(
                root, f"fedcd@{config.baseline}", replace(config, profile=False), stub_urls, procs, work, rng, progress
            ).results
        progress("SDK per call")
        results.append(_sdk_per_call(stub_urls[0], config))
        if config.compare_litellm:
            progress("LiteLLM proxy")
            results += _litellm(config, stub_urls[0], procs, work)
    finally:
        procs.stop_all()
    return {
        "config": asdict(config),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_before": load_before,
                    "loadavg_after": loadavg()},
        "revision": revision(),
        "results": [asdict(r) for r in results],
        "median_cpu_ms": statistics.median(r.cpu_ms_per_request for r in results if r.target == "fedcd")
        if results else None,
        "logs": str(work),
        "profile": profile_text,
    }
