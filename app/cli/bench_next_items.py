"""`fedcd bench next-items`: adaptive item selection against random and fixed order on real responses, and the
selection's latency against the whole bank (evaluation.next_items)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from app.cli.common import console, err
from app.cli.training import bench
from app.schemas.next_items import DEFAULT_COUNT, DEFAULT_RANDOMESQUE  # the API's defaults, timed and simulated


@bench.command("next-items")
def bench_next_items(
    dataset: Annotated[str, typer.Option(help="frcsub | assist0910 | a folder with qmatrix.csv + responses.csv")
                       ] = "frcsub",
    max_students: Annotated[Optional[int], typer.Option(min=10, help="subsample the dataset before the split "
                                                         "(seeded) to bound training time")] = None,
    test_students: Annotated[Optional[int], typer.Option(min=1, help="simulate at most this many test students "
                                                          "(seeded subsample)")] = None,
    k_max: Annotated[int, typer.Option(min=1, max=100, help="items asked per student")] = 20,
    local_fed_model: Annotated[str, typer.Option(help="local-fed kind trained on the train split (auto: as served)")
                               ] = "auto",
    local_fed_rounds: Annotated[int, typer.Option(min=1, help="federated training rounds")] = 10,
    latency_calls: Annotated[int, typer.Option(min=0, help="selections timed against the whole bank (0: none)")] = 200,
    seed: Annotated[int, typer.Option(help="seed for subsampling, splits, hold-outs, orders and local-fed")] = 0,
    data_dir: Annotated[Optional[Path], typer.Option(help="folder holding the public datasets (default "
                                                     "../shared/data)")] = None,
    out: Annotated[Path, typer.Option("--out", help="output folder")] = Path("reports/next-items"),
) -> None:
    """Train local-fed on the train split, then ask each test student's own answered items one at a time by adaptive
    selection, random order and the bank's order; write results.json, report.md and next_items.png."""
    import numpy as np

    from evaluation.next_items import bank_for, bench_policies, latency, simulate, student_cases
    from evaluation.next_items_report import write_next_items_report
    from evaluation.served import LocalFedTraining, train_local_fed
    from providers.local_fed import untrained_model
    from qmatrix.catalog import load_dataset
    from qmatrix.splits import split_holdout, split_students

    try:
        data = load_dataset(dataset, data_dir=data_dir, max_students=max_students, seed=seed)
        training = LocalFedTraining(model=local_fed_model, rounds=local_fed_rounds)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    load = os.getloadavg()[0]
    q = data.qmatrix
    split = split_students(data.students, seed=seed)
    test = split.test
    if test_students is not None and test_students < len(test):
        keep = np.sort(np.random.default_rng(seed).choice(len(test), size=test_students, replace=False))
        test = [test[i] for i in keep]
    err.print(f"[dim]training local-fed on {len(split.train)} train students ...[/]")
    with tempfile.TemporaryDirectory(prefix="fedcd-next-items-") as folder:
        entity, trained = train_local_fed(split.train, q, simulated=data.simulated, training=training, seed=seed,
                                          folder=Path(folder))
        started = time.perf_counter()
        bank = bank_for(q, entity.serving_model(q.id, None, q.concepts), untrained_model(tuple(q.concepts)))
        bank_seconds = time.perf_counter() - started
    observed, held = split_holdout(test, seed)
    cases = student_cases(bank, observed, held, test)
    err.print(f"[dim]simulating {len(cases)} test students ...[/]")
    run = simulate(bank, cases, k_max=k_max, seed=seed, policies=bench_policies(DEFAULT_RANDOMESQUE))
    timed = latency(bank, cases, count=DEFAULT_COUNT, randomesque=DEFAULT_RANDOMESQUE, repeats=latency_calls,
                    seed=seed) if latency_calls else None
    facts = {"test_students": len(cases), "test_split": len(split.test), "train_students": len(split.train),
             "seed": seed, "model": bank.model, "kind": bank.kind, "rounds": trained.get("rounds"),
             "bank_items": len(bank.item_ids), "concepts": len(bank.concepts), "bank_seconds": bank_seconds,
             "load_average": round(load, 1), "max_students": max_students}
    args = ["bench", "next-items", "--dataset", dataset,
            *(["--max-students", str(max_students)] if max_students else []),
            *(["--test-students", str(test_students)] if test_students else []), "--k-max", str(k_max),
            "--local-fed-model", local_fed_model, "--local-fed-rounds", str(local_fed_rounds), "--latency-calls",
            str(latency_calls), "--seed", str(seed), "--out", str(out)]
    paths = write_next_items_report(run, out, dataset=dataset, facts=facts, latency=timed,
                                    command="fedcd " + " ".join(args))
    console.print((out / "report.md").read_text(), markup=False, highlight=False, soft_wrap=True)
    console.print("wrote " + ", ".join(str(p) for p in paths))
