"""`fedcd train` (SIMULATION: institutions partitioned from one dataset), `fedcd bench federated` and
`fedcd models`: the federated-trained local model. Real institutions: `fedcd federation` (app/cli/federation.py)."""

from __future__ import annotations

import math
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli.common import cli, console, err, parse_epsilons
from app.settings import Settings


@cli.command()
def train(
    dataset: Annotated[str, typer.Option(help="synthetic | frcsub | assist0910 | uci | a folder")] = "synthetic",
    clients: Annotated[int, typer.Option(min=1, help="institutions (partitions of the students)")] = 3,
    rounds: Annotated[int, typer.Option(min=1, help="federated rounds (fewer if the ε budget runs out)")] = 10,
    dp: Annotated[str, typer.Option(help="none | student (DP-SGD in each client) | client (noise on clipped updates)")] = "none",
    epsilon: Annotated[Optional[float], typer.Option(help="ε budget; required with --dp student|client")] = None,
    delta: Annotated[float, typer.Option(help="δ of the (ε, δ) budget")] = 1e-5,
    secagg: Annotated[bool, typer.Option("--secagg", help="secure aggregation (Flower SecAgg+)")] = False,
    aggregation: Annotated[str, typer.Option(help="fedavg | fedprox | trimmed | median")] = "fedavg",
    partition: Annotated[str, typer.Option(help="iid | dirichlet (non-IID by ability)")] = "iid",
    alpha: Annotated[float, typer.Option(help="Dirichlet concentration for --partition dirichlet")] = 0.5,
    max_students: Annotated[Optional[int], typer.Option(help="subsample the dataset (seeded)")] = None,
    seed: Annotated[int, typer.Option(help="seed for splits, partitions, sampling and noise")] = 0,
    force: Annotated[bool, typer.Option("--force", help="publish even if the promotion gate refuses (recorded)")] = False,
    engine: Annotated[str, typer.Option(help="inprocess (fedcd's driver) | flower (Flower ServerApp/ClientApp)")] = "inprocess",
    deployment: Annotated[
        bool, typer.Option("--deployment", help="with --engine flower: flower-superlink + supernodes on 127.0.0.1")
    ] = False,
    data_dir: Annotated[Optional[Path], typer.Option(help="folder holding the public datasets")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="model registry folder (default: the gateway's)")] = None,
    model: Annotated[
        str, typer.Option(help="auto (every candidate kind, the best held-out one published) | higher-order-irt "
                          "(local-fed v2) | irt-2pl (a federated 2PL) | evidence-encoder (v1); either engine")
    ] = "auto",
    item_release_share: Annotated[Optional[float], typer.Option(
        min=0.0, max=0.99, help="with --dp student (either engine): the share of ε spent releasing per-item sums "
        "that start the item parameters (the rest on DP-SGD, item parameters held); 0: DP-SGD over every parameter "
        "[default: the trainer's, federated.item_release.DEFAULT_RELEASE_SHARE, 0.9]")
    ] = None,
) -> None:
    """SIMULATION: train local-fed across institutions partitioned from one dataset, and publish it, signed.

    For experiments. Real institutions, each keeping its own data, use `fedcd federation`."""
    from qmatrix.catalog import load_dataset
    from federated import PublishOptions, TrainingConfig, dp_mode, train_federated
    from federated.item_release import DEFAULT_RELEASE_SHARE
    from federated.models import TRAINABLE_KINDS, candidate_kinds

    if item_release_share is None:
        item_release_share = DEFAULT_RELEASE_SHARE

    aggregation = {"trimmed": "trimmed_mean"}.get(aggregation, aggregation)
    problems = []
    try:
        private = dp_mode(dp).private
    except ValueError:
        problems.append("--dp must be none, student or client")
        private = True  # an unknown mode is not taken for "no DP"
    if model not in TRAINABLE_KINDS:
        problems.append(f"--model: unknown model kind {model!r}; one of {', '.join(TRAINABLE_KINDS)}")
    if private and epsilon is None:
        problems.append("--epsilon is required with --dp student|client")
    if not private and epsilon is not None:
        problems.append("--epsilon only applies with --dp student|client")
    if aggregation not in ("fedavg", "fedprox", "trimmed_mean", "median"):
        problems.append("--aggregation must be fedavg, fedprox, trimmed or median")
    if secagg and aggregation in ("trimmed_mean", "median"):
        problems.append("--secagg hides individual updates, which trimmed/median aggregation must inspect: choose one")
    if engine not in ("inprocess", "flower"):
        problems.append("--engine must be inprocess or flower")
    if secagg and engine != "flower":
        problems.append("--secagg needs --engine flower (Flower SecAgg+)")
    if deployment and engine != "flower":
        problems.append("--deployment needs --engine flower")
    if problems:
        for problem in problems:
            err.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2)
    try:
        data = load_dataset(dataset, data_dir=data_dir, max_students=max_students, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    registry = out or Settings().registry_dir
    table = Table(title=f"SIMULATED federation: {clients} institutions partitioned from {data.name} "
                        f"({'SIMULATED' if data.simulated else 'real'} data)")
    for column in ("round", "loss", "held-out AUC", "ε spent", "bytes sent", "seconds"):
        table.add_column(column, justify="right")
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task("rounds", total=rounds * len(candidate_kinds(model)))  # every candidate kind's rounds

        def on_round(record: object) -> None:
            r = record  # federated.RoundRecord
            table.add_row(
                # under DP the training loss is not released (NaN: outside the accounting)
                str(r.round), "—" if math.isnan(r.train_loss) else f"{r.train_loss:.4f}",  # type: ignore[attr-defined]
                f"{r.auc:.4f}",  # type: ignore[attr-defined]
                "—" if r.epsilon is None else f"{r.epsilon:.3f}", f"{r.bytes_sent:,}", f"{r.seconds:.2f}",  # type: ignore[attr-defined]
            )
            bar.advance(task)

        try:
            if engine == "flower":
                result = _train_with_flower(
                    data, registry, clients=clients, rounds=rounds, dp=dp, epsilon=epsilon, delta=delta, secagg=secagg,
                    aggregation=aggregation, partition=partition, alpha=alpha, seed=seed, deployment=deployment,
                    model_kind=model, item_release_share=item_release_share, progress=on_round, force=force,
                )
            else:
                config = TrainingConfig(
                    clients=clients, rounds=rounds, dp=dp, epsilon=epsilon, delta=delta, aggregation=aggregation,  # type: ignore[arg-type]
                    partition=partition, alpha=alpha, seed=seed, model_kind=model,  # type: ignore[arg-type]
                    item_release_share=item_release_share,
                )
                result = train_federated(dataset=data, registry=registry, config=config,
                                         publish=PublishOptions(force=force), progress=on_round)
        except ValueError as exc:
            err.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc
    console.print(table)
    if result.stop_reason:
        console.print(f"stopped early: {result.stop_reason}")
    console.print(f"held-out metrics: {json.dumps(result.heldout_metrics)}")
    if not result.published:
        err.print(f"[red]not published:[/] {'; '.join(result.decision.reasons)}")
        raise typer.Exit(1)
    console.print(f"published {result.version} (signed) to {registry} in {result.seconds:.1f} s")


def _train_with_flower(data, registry, *, progress, force, **options):  # type: ignore[no-untyped-def]
    """Train on Flower, then gate and publish exactly as the in-process trainer does."""
    import tempfile

    from federated.flower import FlowerDeployment, FlowerTraining, train_flower
    from federated.publish import publish_trained

    # The manifest records ``options`` as given (publish_trained), so the plan is built from them, not instead.
    plan = FlowerTraining(**{k: v for k, v in options.items() if k != "deployment"})
    with tempfile.TemporaryDirectory(prefix="fedcd-flower-") as work:
        fed = train_flower(dataset=data, plan=plan, out_dir=Path(work), progress=progress,
                           deployment=FlowerDeployment() if options.get("deployment") else None)
        return publish_trained(fed, dataset=data, registry=registry, options=options, force=force)


bench = typer.Typer(help="benchmarks that write reports")
cli.add_typer(bench, name="bench")


@bench.command("federated")
def bench_federated(
    datasets: Annotated[str, typer.Option(help="comma-separated: frcsub, assist0910, synthetic, ...")] = "frcsub,assist0910",
    clients: Annotated[int, typer.Option(min=2)] = 3,
    rounds: Annotated[int, typer.Option(min=1)] = 10,
    epsilons: Annotated[str, typer.Option(help="student-level DP budgets")] = "1,2,8",
    max_students: Annotated[Optional[int], typer.Option(help="subsample each dataset (seeded)")] = None,
    max_items: Annotated[Optional[int], typer.Option(help="keep each student's first N responses")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    out: Annotated[Path, typer.Option("--out")] = Path("reports/federated"),
) -> None:
    """Centralized vs federated vs federated with student-level DP: held-out AUC, bytes and seconds per round."""
    from qmatrix.catalog import load_dataset
    from federated.benchmark import compare_training, write_comparison

    eps = parse_epsilons(epsilons)
    names = [d.strip() for d in datasets.split(",") if d.strip()]
    results = []
    for name in names:
        data = load_dataset(name, max_students=max_students, max_items=max_items, seed=seed)
        results.append(compare_training(data, clients=clients, rounds=rounds, epsilons=eps, seed=seed,
                                        on_setting=lambda s, n=name: err.print(f"{n}: training {s} ...")))
    args = ["bench", "federated", "--datasets", ",".join(names), "--clients", str(clients), "--rounds", str(rounds),
            "--epsilons", ",".join(f"{e:g}" for e in eps), "--seed", str(seed), "--out", str(out)]
    if max_students is not None:
        args += ["--max-students", str(max_students)]
    if max_items is not None:
        args += ["--max-items", str(max_items)]
    paths = write_comparison(results, out, command="fedcd " + " ".join(args))
    console.print(f"wrote {', '.join(str(p) for p in paths)}")




models = typer.Typer(help="the signed model registry behind local-fed")
cli.add_typer(models, name="models")


def _registry(folder: Path | None):  # type: ignore[no-untyped-def]
    from federated import ModelRegistry

    return ModelRegistry(folder or Settings().registry_dir)


@contextlib.contextmanager
def _registry_errors(label: str = "error") -> Iterator[None]:
    """A registry refusal (bad signature, unknown version, ambiguous Q-matrix) is exit code 1 with its reason."""
    from federated import RegistryError

    try:
        yield
    except RegistryError as exc:
        err.print(f"[red]{label}:[/] {exc}")
        raise typer.Exit(1) from exc


@models.command("list")
def list_models(
    registry: Annotated[Optional[Path], typer.Option(help="registry folder (default: the gateway's)")] = None,
    qmatrix: Annotated[Optional[str], typer.Option(help="only the versions trained for this Q-matrix id")] = None,
) -> None:
    """Every published version, its Q-matrix, whether its signature verifies, and which is active per Q-matrix."""
    with _registry_errors():
        rows = _registry(registry).list_versions(qmatrix)
    if not rows:
        console.print("no published model")
        return
    table = Table(title="local-fed model versions")
    for column in ("version", "Q-matrix", "active", "signature", "created", "rounds", "DP (ε)", "AUC", "note"):
        table.add_column(column, no_wrap=column in ("version", "signature"))
    for row in rows:
        auc, eps = row.get("auc"), row.get("epsilon")
        table.add_row(
            row["version"], str(row.get("qmatrix_id") or ""), "yes" if row["active"] else "",
            "verified" if row["verified"] else "FAILED", str(row.get("created_at") or "")[:10],
            str(row.get("rounds") or ""), f"{row.get('dp_mode') or ''}" + ("" if eps is None else f" ({eps:.2f})"),
            "" if auc is None else f"{auc:.3f}", str(row.get("error") or ("forced" if row.get("forced") else "")),
        )
    console.print(table)


@models.command("rollback")
def rollback_model(
    version: Annotated[Optional[str], typer.Argument(help="version id (default: the one active before)")] = None,
    qmatrix: Annotated[Optional[str], typer.Option(help="the Q-matrix whose model to roll back (needed when "
                                                   "several have models and no version is named)")] = None,
    registry: Annotated[Optional[Path], typer.Option(help="registry folder (default: the gateway's)")] = None,
) -> None:
    """Make an earlier version active for its Q-matrix (verified first). A running gateway serves it at once."""
    folder = _registry(registry)
    with _registry_errors():
        active = folder.rollback(version, qmatrix_id=qmatrix)
        owner = folder.verify(active).get("qmatrix_id")
    console.print(f"active version for Q-matrix {owner}: {active}")


@models.command("verify")
def verify_model(
    version: Annotated[str, typer.Argument(help="version id")],
    registry: Annotated[Optional[Path], typer.Option(help="registry folder (default: the gateway's)")] = None,
) -> None:
    """Check a version's Ed25519 signature and weights hash."""
    with _registry_errors("signature check failed"):
        manifest = _registry(registry).verify(version)
    console.print(f"{version}: signature verified (trained {manifest.get('trained_at')}, {manifest.get('rounds')} rounds)")
