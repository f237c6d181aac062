"""`fedcd bench first-request`: the README's first curl on a fresh start, timed against later requests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import console, err
from app.cli.training import bench


@bench.command("first-request")
def bench_first_request(
    later: Annotated[int, typer.Option(min=0, help="requests right after the first one (each its own student and "
                                       "responses)")] = 5,
    after_calibration: Annotated[int, typer.Option(min=0, help="requests once the first-start calibration job has "
                                                   "finished (0: do not wait for it)")] = 5,
    max_seconds: Annotated[float, typer.Option(min=1, help="bound on everything from the gateway's start, start-up "
                                               "included")] = 1200.0,
    request_timeout: Annotated[float, typer.Option(min=1, help="seconds per request")] = 300.0,
    simulated: Annotated[bool, typer.Option(help="tests only: one SIMULATED entity instead of the default "
                                            "federation (not the measured configuration)")] = False,
    revision: Annotated[str | None, typer.Option(help="run the gateway of this git revision (git archive) instead "
                                                 "of this checkout's: the 'before' of a change")] = None,
    out: Annotated[Path, typer.Option("--out")] = Path("reports/first-request"),
) -> None:
    """Start the gateway in a fresh state folder with the default configuration, send the README's first curl as
    soon as /healthz answers, then later requests (during and after the first-start calibration); write README.md
    and results.json with each request's time, entity outcomes and the calibration job's status."""
    from bench import BenchSetupError, FirstRequestBenchConfig, run_first_request_bench, write_first_request_report

    config = FirstRequestBenchConfig(later=later, after_calibration=after_calibration, max_seconds=max_seconds,
                                     request_timeout_s=request_timeout, simulated=simulated, revision=revision)
    try:
        data = run_first_request_bench(config, progress=lambda message: err.print(f"[dim]{message} ...[/]"))
    except BenchSetupError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    args = ["bench", "first-request", "--later", str(later), "--after-calibration", str(after_calibration),
            "--max-seconds", f"{max_seconds:g}", "--request-timeout", f"{request_timeout:g}",
            *(["--simulated"] if simulated else []), *(["--revision", revision] if revision else []), "--out", str(out)]
    paths = write_first_request_report(data, out, command="fedcd " + " ".join(args))
    console.print((out / "README.md").read_text(), markup=False, highlight=False, soft_wrap=True)
    console.print("wrote " + ", ".join(str(p) for p in paths))
