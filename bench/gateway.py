"""``fedcd bench gateway``: what one diagnosis costs the gateway, against fixed-latency stub providers.

Real processes on loopback: N stub OpenAI-compatible servers (``bench.stub``, fixed latency), the gateway
(``fedcd serve``, its own process, with the chosen workers, ledger and database), and a load generator (this
process, bounded in count and time). Measured per scenario: latency percentiles, latency added over the
stub's, throughput, and the gateway's CPU per diagnosis (the process tree's user+system time, from psutil).
Optionally LiteLLM's proxy runs against the same stub, measured the same way, per single pass-through call.

With ``baseline`` (a git revision), that revision's gateway runs beside this checkout's, and every scenario is
split into ``rounds`` chunks that the two take turns on, in A B B A order: a shared machine that speeds up or slows
down during the run (measured: up to 56% between runs) weighs on both alike, so their ratio holds.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.load import Measured, RequestMaker, ScenarioResult, Target, measure, scenario_result
from bench.processes import ROOT, Processes, free_port, wait_http
from bench.profiling import BenchSetupError, Profile, py_spy_command, start_profile
from bench.provenance import checkout, loadavg, revision

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
    rounds: int = 4  # with a baseline: turns each scenario is split into, the two gateways alternating (A B B A …)
    seed: int = 0


def _scenario(
    target: Target, name: str, make: RequestMaker, *, n: int, concurrency: int, config: GatewayBenchConfig,
    per: str = "diagnosis",
) -> ScenarioResult:
    """One scenario on one server, in one go (LiteLLM's proxy)."""
    measured = measure(target, make, n=n, concurrency=concurrency, max_seconds=config.max_seconds)
    return scenario_result(target, name, measured, concurrency=concurrency, stub_latency_ms=config.stub_latency_ms,
                           per=per)


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
    litellm = Target("litellm", proc.pid, {"Authorization": f"Bearer {master_key}"})
    for concurrency, n in ((1, config.requests_c1), (config.concurrency, config.requests_cmax)):
        results.append(_scenario(
            litellm, f"one pass-through call, c={concurrency}", lambda k: (url, body), n=n, concurrency=concurrency,
            config=config, per="call",
        ))
    return results


@dataclass
class _Gateway:
    """One checkout's gateway, started and warmed up: its target (label, pid, key) and its base URL."""

    target: Target
    base: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _start_gateway(
    root: Path, label: str, config: GatewayBenchConfig, stub_urls: Sequence[str], procs: Processes, work: Path,
    progress: Callable[[str], None],
) -> _Gateway:
    """Start the gateway of the checkout at ``root`` with its own state, upload the big Q-matrix, warm it up (not
    measured: imports, connection pools, caches) and store the repeat path's first answer."""
    env = _fedcd_env(config, work / f"state-{label}", stub_urls, root)
    key = json.loads(subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "create", "--tenant", "bench", "--role", "admin", "--json"],
        env=env, cwd=root, capture_output=True, text=True, check=True, timeout=120,
    ).stdout)["api_key"]
    headers = {"Authorization": f"Bearer {key}"}
    port = free_port()
    process = procs.start(f"gateway-{label}", [sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                                               "--workers", str(config.workers)], env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", process)
    progress(f"{label}: gateway up ({config.workers} worker(s), ledger {'on' if config.ledger else 'off'})")
    r = httpx.post(f"{base}/v1/qmatrices?id=bank", content=_big_qmatrix_csv(config.big_items),
                   headers={**headers, "content-type": "text/csv"}, timeout=120)
    r.raise_for_status()
    gateway = _Gateway(Target(label, process.pid, headers), base, process)
    warm_up = random.Random(f"{config.seed}-warm-up-{label}")  # each gateway its own students
    measure(gateway.target, _singles(gateway, "example-prealgebra", EXAMPLE_ITEMS, warm_up), n=30, concurrency=4,
            max_seconds=config.max_seconds)
    httpx.post(f"{base}/v1/diagnose", json=_REPEAT_BODY, headers=headers, timeout=60).raise_for_status()
    return gateway


# The repeat path's request: stored once per gateway at start, then asked again and again.
_REPEAT_BODY = {"student_id": "repeat-student", "qmatrix_id": "example-prealgebra",
                "responses": _responses(random.Random(7), EXAMPLE_ITEMS)}


def _singles(gateway: _Gateway, qid: str, items: Sequence[str], rng: random.Random) -> RequestMaker:
    """One new student per request (a repeat of another's student would measure the repeat path)."""
    def make(k: int) -> tuple[str, dict[str, Any]]:
        return f"{gateway.base}/v1/diagnose", {"student_id": f"s{k}-{rng.random():.9f}", "qmatrix_id": qid,
                                                "responses": _responses(rng, items)}
    return make


@dataclass(frozen=True)
class _Spec:
    """One fedcd scenario: how to make its requests for a gateway, how many, how many at once, and per what."""

    name: str
    requests: Callable[[_Gateway], RequestMaker]
    n: int
    concurrency: int
    per: str = "diagnosis"
    units: int = 1  # diagnoses per request (a batch's students)
    notes: tuple[str, ...] = ()


def _specs(config: GatewayBenchConfig, rng: random.Random) -> list[_Spec]:
    bank_items = [f"b{i:05d}" for i in range(config.big_items)]

    def batch(gateway: _Gateway) -> RequestMaker:
        def make(k: int) -> tuple[str, dict[str, Any]]:
            students = [{"student_id": f"b{k}-{j}-{rng.random():.9f}", "responses": _responses(rng, EXAMPLE_ITEMS)}
                        for j in range(config.batch_size)]
            return f"{gateway.base}/v1/diagnose/batch", {"qmatrix_id": "example-prealgebra", "students": students}
        return make

    return [
        _Spec("diagnosis, 12-item Q-matrix, c=1", lambda g: _singles(g, "example-prealgebra", EXAMPLE_ITEMS, rng),
              config.requests_c1, 1),
        _Spec(f"diagnosis, 12-item Q-matrix, c={config.concurrency}",
              lambda g: _singles(g, "example-prealgebra", EXAMPLE_ITEMS, rng), config.requests_cmax, config.concurrency),
        _Spec(f"diagnosis, {config.big_items}-item Q-matrix, c=1", lambda g: _singles(g, "bank", bank_items, rng),
              config.requests_c1, 1),
        _Spec("identical request again (repeat path), c=1", lambda g: lambda k: (f"{g.base}/v1/diagnose", _REPEAT_BODY),
              config.repeats, 1, notes=("answered from the stored answer: no entity call",)),
        _Spec(f"batch of {config.batch_size} students, c=1", batch, config.batches, 1,
              per=f"student (batches of {config.batch_size})", units=config.batch_size),
    ]


def _chunks(n: int, rounds: int) -> list[int]:
    """``n`` split into at most ``rounds`` near-equal, non-empty parts."""
    parts = max(1, min(rounds, n))
    return [n // parts + (1 if k < n % parts else 0) for k in range(parts)]


def _run_scenarios(
    gateways: Sequence[_Gateway], config: GatewayBenchConfig, rng: random.Random, work: Path, procs: Processes,
    progress: Callable[[str], None],
) -> tuple[list[ScenarioResult], str | None]:
    """Every fedcd scenario on every gateway; with two, each scenario in turns (A B, B A, A B, …)."""
    by_target: dict[str, list[ScenarioResult]] = {g.target.label: [] for g in gateways}
    profile_text = None
    for index, spec in enumerate(_specs(config, rng)):
        measured = {g.target.label: Measured() for g in gateways}
        chunks = _chunks(spec.n, config.rounds if len(gateways) > 1 else 1)
        for turn, size in enumerate(chunks):
            for gateway in gateways if turn % 2 == 0 else list(reversed(gateways)):
                progress(f"{gateway.target.label}: {spec.name}"
                         + (f" (turn {turn + 1} of {len(chunks)})" if len(chunks) > 1 else ""))
                # py-spy samples this checkout's gateway in its first turn of the first scenario (concurrency 1)
                # only: never while the baseline is measured beside it.
                profiled = config.profile and index == 0 and turn == 0 and gateway is gateways[0]
                profile: Profile | None = start_profile(gateway.target.pid, work, procs.start) if profiled else None
                measured[gateway.target.label].add(measure(
                    gateway.target, spec.requests(gateway), n=size, concurrency=spec.concurrency,
                    max_seconds=config.max_seconds / len(chunks),
                ))
                if profile is not None:
                    profile_text = profile.stop()
        for gateway in gateways:
            by_target[gateway.target.label].append(scenario_result(
                gateway.target, spec.name, measured[gateway.target.label], concurrency=spec.concurrency,
                stub_latency_ms=config.stub_latency_ms, per=spec.per, per_request_units=spec.units,
                notes=list(spec.notes),
            ))
    return [r for results in by_target.values() for r in results], profile_text


def run_gateway_bench(config: GatewayBenchConfig, *, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run every scenario; returns the results as plain data (``bench.report`` writes them)."""
    # Missing tools are reported before minutes of measuring, not after.
    if config.compare_litellm:
        _litellm_command(config)
    if config.profile and py_spy_command() is None:
        raise BenchSetupError("--profile needs py-spy: pip install -e '.[bench]'")
    if config.baseline and config.database_url:
        # Both gateways run at once: two revisions' migrations, job runners and the same tenant on one database.
        raise BenchSetupError("--baseline runs two gateways at once: each needs its own database, so it cannot be "
                              "combined with --database-url (drop one of them)")
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
        gateways = [_start_gateway(ROOT, "fedcd", config, stub_urls, procs, work, progress)]
        if config.baseline:
            root = checkout(config.baseline, work / "baseline")
            progress(f"baseline: the gateway at {config.baseline}")
            gateways.append(_start_gateway(root, f"fedcd@{config.baseline}", config, stub_urls, procs, work, progress))
        # One generator for both checkouts: they get different students (a repeat of another's student would
        # measure the repeat path), from the same distribution of responses.
        fedcd, profile_text = _run_scenarios(gateways, config, random.Random(config.seed), work, procs, progress)
        results += fedcd
        for gateway in gateways:  # idle, they would still cost the machine what the next scenarios measure
            gateway.stop()
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
