"""`fedcd bench gateway`: latency, throughput and CPU per diagnosis against fixed-latency stub providers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from app.cli.common import console, err
from app.cli.training import bench


@bench.command("gateway")
def bench_gateway(
    entities: Annotated[int, typer.Option(min=1, help="openai_compatible entities, one stub server each")] = 3,
    stub_latency_ms: Annotated[float, typer.Option(min=0)] = 50.0,
    workers: Annotated[int, typer.Option(min=1)] = 1,
    ledger: Annotated[bool, typer.Option("--ledger/--no-ledger")] = True,
    database_url: Annotated[Optional[str], typer.Option(help="PostgreSQL URL (default: SQLite in a temp folder)")] = None,
    requests: Annotated[int, typer.Option(min=10, help="requests per concurrency-1 scenario")] = 200,
    requests_concurrent: Annotated[int, typer.Option(min=10, help="requests in the concurrent scenario")] = 1000,
    concurrency: Annotated[int, typer.Option(min=2)] = 50,
    repeats: Annotated[int, typer.Option(min=10, help="identical requests in the repeat-path scenario")] = 200,
    batches: Annotated[int, typer.Option(min=1, help="batch requests in the batch scenario")] = 20,
    max_seconds: Annotated[float, typer.Option(min=1, help="time bound per scenario")] = 120.0,
    compare_litellm: Annotated[bool, typer.Option(
        "--compare-litellm", help="also LiteLLM's proxy (if installed), taking turns with the gateway in the 12-item "
        "diagnosis scenarios (see --rounds)")] = False,
    litellm_command: Annotated[Optional[str], typer.Option(help="the `litellm` executable")] = None,
    profile: Annotated[bool, typer.Option(
        "--profile", help="sample the gateway with py-spy in the 12-item scenarios (c=1, concurrent)")] = False,
    baseline: Annotated[Optional[str], typer.Option(
        help="a git revision: its gateway runs the same scenarios in this run (before/after as ratios)")] = None,
    rounds: Annotated[int, typer.Option(
        min=1, help="with --baseline or --compare-litellm: turns each scenario is split into, the servers alternating "
        "(A B, B A, …: an even count gives each the first slot equally); the report gives the median over turns and "
        "their range")] = 4,
    out: Annotated[Path, typer.Option("--out")] = Path("reports/gateway"),
) -> None:
    """Start stub providers, the gateway and a bounded load generator on loopback; write results.json, report.md
    and latency_throughput.png."""
    from bench import BenchSetupError, GatewayBenchConfig, run_gateway_bench, write_gateway_report

    config = GatewayBenchConfig(
        entities=entities, stub_latency_ms=stub_latency_ms, workers=workers, ledger=ledger, database_url=database_url,
        requests_c1=requests, requests_cmax=requests_concurrent, concurrency=concurrency, max_seconds=max_seconds,
        repeats=repeats, batches=batches,
        compare_litellm=compare_litellm, litellm_command=litellm_command, profile=profile, baseline=baseline, rounds=rounds,
    )
    try:
        data = run_gateway_bench(config, progress=lambda message: err.print(f"[dim]{message} ...[/]"))
    except BenchSetupError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    args = ["bench", "gateway", "--entities", str(entities), "--stub-latency-ms", f"{stub_latency_ms:g}", "--workers",
            str(workers), "--ledger" if ledger else "--no-ledger", "--requests", str(requests),
            "--requests-concurrent", str(requests_concurrent), "--concurrency", str(concurrency)]
    default = GatewayBenchConfig()
    if (repeats, batches) != (default.repeats, default.batches):
        args += ["--repeats", str(repeats), "--batches", str(batches)]
    args += ["--out", str(out)]
    if compare_litellm:
        args.append("--compare-litellm")
        if litellm_command:
            args += ["--litellm-command", litellm_command]
    if profile:
        args.append("--profile")
    if baseline:
        args += ["--baseline", baseline]
    if (baseline or compare_litellm) and rounds != default.rounds:
        args += ["--rounds", str(rounds)]
    paths = write_gateway_report(data, out, command="fedcd " + " ".join(args))
    console.print((out / "report.md").read_text())
    console.print("wrote " + ", ".join(str(p) for p in paths))
