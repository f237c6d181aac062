"""`fedcd bench cost`: cost, ε and latency per student, paid calls and held-out AUC of federation `all`, `calibrated`
and `selective`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.cli.common import console, err
from app.cli.evaluation import reproduce_line, served_config
from app.cli.training import bench
from app.settings import Settings

DEFAULT_THRESHOLDS = "0.5,0.6,0.7,0.75,0.8,0.85,0.9,0.95"


@bench.command("cost")
def bench_cost(
    dataset: Annotated[str, typer.Option(help="frcsub | assist0910 | a folder with qmatrix.csv + responses.csv")] = "frcsub",
    thresholds: Annotated[str, typer.Option(help="selective thresholds (credible-interval widths in (0, 1]); none: "
                                            "all and calibrated only")] = DEFAULT_THRESHOLDS,
    max_students: Annotated[Optional[int], typer.Option(min=10, help="subsample the dataset (seeded) to bound run time")] = None,
    seed: Annotated[int, typer.Option(help="seed for subsampling, splits, hold-outs, noise and local-fed")] = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="students diagnosed at once")] = 8,
    data_dir: Annotated[Optional[Path], typer.Option(help="folder holding the public datasets (default ../shared/data)")] = None,
    out: Annotated[Path, typer.Option("--out", help="output folder")] = Path("reports/cost"),
    embedded: Annotated[bool, typer.Option("--embedded", help="the embedded LLMs join tier 0 (real CPU inference: slow; "
                                                                "cap the run with --max-students)")] = False,
) -> None:
    """Run the held-out protocol with federation all and selective (each threshold); write results.json, report.md
    and cost_auc.png. Hosted entities are SIMULATED, priced as the models they stand in for."""
    from evaluation.cost import progress_total, run_cost_bench, thresholds_from
    from evaluation.cost_report import write_cost_report
    from qmatrix.catalog import load_dataset

    try:
        levels = thresholds_from(thresholds)
        data = load_dataset(dataset, data_dir=data_dir, max_students=max_students, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    settings = Settings()
    config = served_config(settings, release_epsilon=None)  # the server's defaults, as `fedcd evaluate` uses

    async def run():  # type: ignore[no-untyped-def]
        with Progress(TextColumn(f"bench cost {data.name}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err) as bar:
            task = bar.add_task("students", total=progress_total(data, levels, seed))
            return await run_cost_bench(data, config=config, thresholds=levels, seed=seed, concurrency=concurrency,
                                        progress=lambda k: bar.advance(task, k), embedded=embedded)

    result = asyncio.run(run())
    args = ["bench", "cost", "--dataset", dataset, "--thresholds", ",".join(f"{t:g}" for t in levels) or "none", "--seed",
            str(seed), "--concurrency", str(concurrency), "--out", str(out)]
    if max_students is not None:
        args += ["--max-students", str(max_students)]
    if embedded:
        args.append("--embedded")
    command = reproduce_line(settings, args)
    paths = write_cost_report(result, out, command=command)
    console.print((out / "report.md").read_text())
    console.print("wrote " + ", ".join(str(p) for p in paths))
