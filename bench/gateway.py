"""``fedcd bench gateway``: what one diagnosis costs the gateway, against fixed-latency stub providers.

Real processes on loopback: N stub OpenAI-compatible servers (``bench.stub``, fixed latency), the gateway
(``fedcd serve``, its own process, with the chosen workers, ledger and database), and a load generator (this
process, bounded in count and time). Measured per scenario: latency percentiles, latency added over the
stub's, throughput, and the gateway's CPU per diagnosis (the process tree's user+system time, from psutil).
Optionally LiteLLM's proxy runs against the same stub, measured the same way, per single pass-through call.

With ``baseline`` (a git revision) or ``compare_litellm``, the other server runs beside this checkout's gateway,
and every scenario is split into ``rounds`` chunks that they take turns on, in A B B A order: a shared machine that
speeds up or slows down during the run (measured: up to 56% between runs) weighs on both alike, so their ratio
holds. LiteLLM's proxy takes its turns in the two 12-item diagnosis scenarios (c=1 and c=``concurrency``), one
pass-through call per request; every turn is kept (``ScenarioResult.turns``) for the median and spread.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.litellm import LiteLLMProxy, litellm_command, start_litellm
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
    profile: bool = False  # py-spy (if installed) samples the gateway in the 12-item scenarios (c=1, concurrent)
    baseline: str | None = None  # a git revision: its gateway runs the same scenarios in the same run, for ratios
    rounds: int = 4  # with a baseline or LiteLLM: turns each scenario is split into, servers alternating (A B B A …)
    seed: int = 0


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
         "model": "stub", "api_key": "bench", "max_attempts": 1, "structured_output": "json_schema",
         # The entity's concurrency limit stays in the measured path, sized to the load like the rate limit below:
         # at its default (4 calls in flight) a 50 ms stub caps every entity at 80 calls/s, whatever the gateway.
         "concurrency": config.concurrency}
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


def _sdk_per_call(stub_url: str, config: GatewayBenchConfig, *, official_sdk: bool) -> ScenarioResult:
    """What one entity call costs in-process, measured in a separate process (``bench.sdk_probe``): the path the
    gateway takes to the stub (the thin one, ``providers.openai_local``), or the official SDK's."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.sdk_probe", "--base-url", f"{stub_url}/v1", "--calls", str(config.sdk_calls),
         *(["--official-sdk"] if official_sdk else [])],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300, check=True,
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return ScenarioResult(
        name="one entity call through the official SDK, in-process" if official_sdk else
        "one entity call as the gateway makes it, in-process", target="sdk-official" if official_sdk else "sdk",
        requests=probe["calls"], concurrency=1, seconds=probe["seconds"], ok=probe["calls"], errors=0,
        p50_ms=probe["p50_ms"], p90_ms=probe["p90_ms"], p99_ms=probe["p99_ms"],
        added_p50_ms=probe["p50_ms"] - config.stub_latency_ms, throughput_rps=probe["calls"] / probe["seconds"],
        cpu_ms_per_request=probe["cpu_ms_per_call"], per="call", notes=[f"{probe['adapter']}; {probe['sdk']}"],
    )


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
    gateway = _Gateway(Target(label, process.pid, key), base, process)
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
    litellm: bool = False  # LiteLLM's proxy takes turns here too, one pass-through call per request


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
              config.requests_c1, 1, litellm=True),
        _Spec(f"diagnosis, 12-item Q-matrix, c={config.concurrency}",
              lambda g: _singles(g, "example-prealgebra", EXAMPLE_ITEMS, rng), config.requests_cmax, config.concurrency,
              litellm=True),
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
    gateways: Sequence[_Gateway], litellm: LiteLLMProxy | None, config: GatewayBenchConfig, rng: random.Random,
    work: Path, procs: Processes, progress: Callable[[str], None], stubs: Sequence[int] = (),
) -> tuple[list[ScenarioResult], str | None]:
    """Every fedcd scenario on every gateway; with a baseline or LiteLLM beside it, each scenario in turns
    (A B, B A, A B, …; LiteLLM only in the scenarios it has a counterpart in). ``stubs``: the stub servers' pids,
    whose CPU is read beside each target's (only one target is loaded at a time, so theirs is its callers')."""
    compared = len(gateways) > 1 or litellm is not None
    results: dict[tuple[str, int], ScenarioResult] = {}
    profiles: list[str] = []
    for index, spec in enumerate(_specs(config, rng)):
        # (target, its row's name, request maker) of everyone taking part in this scenario
        takers: list[tuple[Target, str, RequestMaker]] = [(g.target, spec.name, spec.requests(g)) for g in gateways]
        if litellm is not None and spec.litellm:
            takers.append((litellm.target, f"one pass-through call, c={spec.concurrency}", litellm.requests()))
        measured = {target.label: Measured() for target, _, _ in takers}
        chunks = _chunks(spec.n, config.rounds if compared else 1)
        for turn, size in enumerate(chunks):
            for target, name, make in takers if turn % 2 == 0 else list(reversed(takers)):
                progress(f"{target.label}: {name}" + (f" (turn {turn + 1} of {len(chunks)})" if compared else ""))
                # py-spy samples this checkout's gateway in its first turn of the 12-item scenarios (concurrency 1
                # and the concurrent one) only: never while another server is measured beside it.
                profiled = config.profile and spec.litellm and turn == 0 and target is gateways[0].target
                profile: Profile | None = start_profile(
                    target.pid, work, procs.start, name=f"profile-{index}") if profiled else None
                measured[target.label].add(measure(
                    target, make, n=size, concurrency=spec.concurrency, max_seconds=config.max_seconds / len(chunks),
                    upstream=stubs,
                ))
                if profile is not None:
                    profiles.append(f"## {spec.name} (this checkout's gateway, its first turn)\n\n{profile.stop()}")
        for target, name, _ in takers:
            litellm_row = litellm is not None and target is litellm.target
            results[(target.label, index)] = scenario_result(
                target, name, measured[target.label], concurrency=spec.concurrency,
                stub_latency_ms=config.stub_latency_ms,
                per="call" if litellm_row else spec.per, per_request_units=1 if litellm_row else spec.units,
                notes=[f"in turns with: {spec.name}"] if litellm_row else list(spec.notes),
            )
    # grouped by target (this checkout, the baseline, LiteLLM), scenarios in order
    labels = [g.target.label for g in gateways] + ([litellm.target.label] if litellm else [])
    ordered = [results[key] for label in labels for key in sorted(k for k in results if k[0] == label)]
    return ordered, "\n\n".join(profiles) or None


def run_gateway_bench(config: GatewayBenchConfig, *, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run every scenario; returns the results as plain data (``bench.report`` writes them)."""
    # Missing tools are reported before minutes of measuring, not after.
    command = litellm_command(config.litellm_command) if config.compare_litellm else None
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
    litellm: LiteLLMProxy | None = None
    try:
        stub_urls, stub_pids = [], []
        for k in range(config.entities):
            port = free_port()
            stub = procs.start(f"stub{k}", [sys.executable, "-m", "bench.stub", "--port", str(port),
                                             "--latency-ms", str(config.stub_latency_ms)],
                               {**os.environ, "PYTHONPATH": str(ROOT)})
            wait_http(f"http://127.0.0.1:{port}/healthz", stub)
            stub_urls.append(f"http://127.0.0.1:{port}")
            stub_pids.append(stub.pid)
        progress(f"{len(stub_urls)} stub providers at {config.stub_latency_ms:g} ms")
        gateways = [_start_gateway(ROOT, "fedcd", config, stub_urls, procs, work, progress)]
        if config.baseline:
            root = checkout(config.baseline, work / "baseline")
            progress(f"baseline: the gateway at {config.baseline}")
            gateways.append(_start_gateway(root, f"fedcd@{config.baseline}", config, stub_urls, procs, work, progress))
        if command is not None:
            litellm = start_litellm(command, stub_url=stub_urls[0], workers=config.workers, procs=procs, work=work)
            measure(litellm.target, litellm.requests(), n=30, concurrency=4, max_seconds=config.max_seconds)  # warm-up
            progress(f"LiteLLM proxy {litellm.version or '(version unknown)'} up")
        # One generator for both checkouts: they get different students (a repeat of another's student would
        # measure the repeat path), from the same distribution of responses.
        measured, profile_text = _run_scenarios(gateways, litellm, config, random.Random(config.seed), work, procs,
                                                progress, stub_pids)
        results += measured
        for server in [*gateways, *([litellm] if litellm else [])]:  # idle, they still cost the machine CPU
            server.stop()
        progress("one entity call, in-process (the gateway's path, then the official SDK's)")
        results += [_sdk_per_call(stub_urls[0], config, official_sdk=official) for official in (False, True)]
    finally:
        procs.stop_all()
    return {
        "config": asdict(config),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_before": load_before,
                    "loadavg_after": loadavg()},
        "revision": revision(),
        "litellm_version": litellm.version if litellm else None,
        "results": [asdict(r) for r in results],
        "median_cpu_ms": statistics.median(r.cpu_ms_per_request for r in results if r.target == "fedcd")
        if results else None,
        "logs": str(work),
        "profile": profile_text,
    }
