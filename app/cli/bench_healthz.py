"""`fedcd bench healthz`: /healthz latency percentiles while large Q-matrix uploads run concurrently."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import console, err
from app.cli.training import bench


@bench.command("healthz")
def bench_healthz(
    items: Annotated[int, typer.Option(min=1, help="items per uploaded Q-matrix")] = 16_000,
    concepts: Annotated[int, typer.Option(min=1, help="concepts per uploaded Q-matrix (16,000 x 500: just under "
                                          "the 16 MiB upload limit)")] = 500,
    uploads: Annotated[int, typer.Option(min=1, help="uploads in all")] = 8,
    concurrency: Annotated[int, typer.Option(min=1, help="uploads at once")] = 2,
    idle_probes: Annotated[int, typer.Option(min=1, help="/healthz probes before the uploads (the baseline)")] = 200,
    max_seconds: Annotated[float, typer.Option(min=1, help="time bound of the loaded phase")] = 300.0,
    workers: Annotated[int, typer.Option(min=1)] = 1,
    out: Annotated[Path, typer.Option("--out")] = Path("reports/healthz"),
) -> None:
    """Start the gateway on loopback, probe /healthz idle and while Q-matrix uploads run (bounded in count and
    time); write README.md and results.json with p50/p95/p99/max."""
    from bench import HealthzBenchConfig, run_healthz_bench, write_healthz_report

    config = HealthzBenchConfig(items=items, concepts=concepts, uploads=uploads, concurrency=concurrency,
                                idle_probes=idle_probes, max_seconds=max_seconds, workers=workers)
    data = run_healthz_bench(config, progress=lambda message: err.print(f"[dim]{message} ...[/]"))
    args = ["bench", "healthz", "--items", str(items), "--concepts", str(concepts), "--uploads", str(uploads),
            "--concurrency", str(concurrency), "--idle-probes", str(idle_probes), "--max-seconds", f"{max_seconds:g}",
            "--workers", str(workers), "--out", str(out)]
    paths = write_healthz_report(data, out, command="fedcd " + " ".join(args))
    console.print((out / "README.md").read_text(), markup=False, highlight=False, soft_wrap=True)
    console.print("wrote " + ", ".join(str(p) for p in paths))
