"""The ``fedcd`` command: ``serve`` runs the gateway, ``diagnose`` runs the same pipeline in-process."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.settings import Settings
from qmatrix import EXAMPLE_QMATRIX_ID, QMatrixError, load_qmatrix, load_responses_csv

__all__ = ["main"]

cli = typer.Typer(add_completion=False, help="fedcd: privacy-preserving multi-LLM federated cognitive diagnosis")
console = Console()
err = Console(stderr=True)

_CURL = """curl -s http://{host}:{port}/v1/diagnose -H 'content-type: application/json' -d '{{
  "student_id": "demo-student", "qmatrix_id": "{qid}", "include_entities": true,
  "responses": [{{"item_id": "q01", "correct": true}}, {{"item_id": "q03", "correct": false}}, {{"item_id": "q10", "correct": true}}]
}}'"""


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
) -> None:
    """Run the HTTP gateway (OpenAPI docs at /docs)."""
    import uvicorn

    from app.main import create_app

    settings = Settings(host=host, port=port)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def announce() -> None:
        console.print(f"[bold green]fedcd is ready[/] on http://{host}:{port} (docs: http://{host}:{port}/docs)")
        # Plain print: rich would re-wrap the command and break it for pasting.
        print("Try it:\n" + _CURL.format(host=host, port=port, qid=EXAMPLE_QMATRIX_ID), flush=True)

    console.print(f"Starting fedcd; loading entities: {', '.join(s.name for s in settings.entity_specs)} ...")
    uvicorn.run(create_app(settings, on_ready=announce), host=host, port=port, log_level="info")


@cli.command()
def diagnose(
    qmatrix: Annotated[Path, typer.Option("--qmatrix", exists=True, dir_okay=False, help="Q-matrix .csv or .json")],
    responses: Annotated[
        Path, typer.Option("--responses", exists=True, dir_okay=False, help="CSV: [student_id,]item_id,correct[,answer]")
    ],
    epsilon: Annotated[Optional[float], typer.Option(help="ε per entity answer (default: settings)")] = None,
    no_noise: Annotated[bool, typer.Option("--no-noise", help="release answers without privacy noise")] = False,
    sensitivity: Annotated[Optional[str], typer.Option(help="paper (Δ=K) or assessed")] = None,
    entities: Annotated[Optional[str], typer.Option(help="comma-separated entity names (default: all)")] = None,
    show_entities: Annotated[bool, typer.Option("--show-entities", help="also print each entity's privatized answer")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
    seed: Annotated[Optional[int], typer.Option(help="fixed noise seed (reproducible runs, not for production)")] = None,
    aggregation: Annotated[str, typer.Option(help="posterior (Bayes post-processing, the API's default) | mean")] = "posterior",
) -> None:
    """Diagnose every student in RESPONSES with the configured federation, in-process."""
    from app.federation import Federation
    from calibration import AllEntitiesFailed, DiagnosisRequest, UnknownEntities

    settings = Settings()
    try:
        q = load_qmatrix(qmatrix)
        students = load_responses_csv(responses)
        for s in students:
            unknown = q.unknown_items(s.item_ids())
            if unknown:
                raise QMatrixError([f"student {s.student_id}: unknown item ids {', '.join(unknown)}"])
    except (QMatrixError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if epsilon is not None and epsilon <= 0:
        err.print("[red]error:[/] --epsilon must be > 0 (use --no-noise for none)")
        raise typer.Exit(2)
    mode = sensitivity or settings.sensitivity
    if mode not in ("paper", "assessed"):
        err.print("[red]error:[/] --sensitivity must be 'paper' or 'assessed'")
        raise typer.Exit(2)
    names = [n.strip() for n in entities.split(",")] if entities else None
    if aggregation not in ("posterior", "mean"):
        err.print("[red]error:[/] --aggregation must be 'posterior' or 'mean'")
        raise typer.Exit(2)

    async def run() -> list[object]:
        from calibration import PosteriorAggregator, ResidualAggregator
        from app.services.diagnosis import DEFAULT_ENTITY_ERROR_SD

        federation = Federation(settings.entity_specs, seed=seed if seed is not None else settings.noise_seed)
        aggregator = (
            PosteriorAggregator(entity_error_sd={n: DEFAULT_ENTITY_ERROR_SD for n in federation.names})
            if aggregation == "posterior" else ResidualAggregator()
        )
        results: list[object] = []
        try:
            federation.pipeline.select(names)
            with Progress(
                TextColumn("diagnosing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=err, transient=as_json,
            ) as progress:
                task = progress.add_task("students", total=len(students))
                for s in students:
                    request = DiagnosisRequest(
                        student_id=s.student_id,
                        qmatrix=q,
                        responses=s.responses,
                        epsilon=None if no_noise else (epsilon or settings.default_epsilon),
                        mechanism=settings.default_mechanism,
                        sensitivity=mode,  # type: ignore[arg-type]
                        entities=names,
                    )
                    try:
                        results.append(await federation.pipeline.diagnose(request, aggregator))
                    except AllEntitiesFailed as exc:
                        results.append(exc)
                    progress.advance(task)
        finally:
            await federation.aclose()
        return results

    try:
        results = asyncio.run(run())
    except UnknownEntities as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    _print(results, as_json=as_json, show_entities=show_entities)
    if all(not hasattr(r, "mastery") for r in results):
        raise typer.Exit(1)


def _print(results: list[object], *, as_json: bool, show_entities: bool) -> None:
    from dataclasses import asdict

    from calibration import AllEntitiesFailed

    if as_json:
        out = [
            {"error": str(r), "entities": [asdict(o) for o in r.outcomes]} if isinstance(r, AllEntitiesFailed) else asdict(r)  # type: ignore[call-overload]
            for r in results
        ]
        console.print_json(json.dumps(out))
        return
    for r in results:
        if isinstance(r, AllEntitiesFailed):
            err.print(f"[red]{r}[/]")
            continue
        table = Table(title=f"student {r.student_id}  (privacy: {r.privacy['mechanism']}, ε={r.privacy['epsilon']})")  # type: ignore[attr-defined]
        table.add_column("concept")
        table.add_column("mastery", justify="right")
        names = [o.name for o in r.entities] if show_entities else []  # type: ignore[attr-defined]
        for name in names:
            table.add_column(name, justify="right")
        for concept in r.concepts:  # type: ignore[attr-defined]
            value = r.mastery.get(concept)  # type: ignore[attr-defined]
            cells = [f"{value:.2f}" if value is not None else "—"]
            for o in r.entities if show_entities else []:  # type: ignore[attr-defined]
                v = (o.mastery or {}).get(concept)
                cells.append(f"{v:.2f}" if v is not None else ("failed" if o.status == "failed" else "—"))
            table.add_row(concept, *cells)
        console.print(table)
        for o in r.entities:  # type: ignore[attr-defined]
            if o.status == "failed":
                err.print(f"  [yellow]{o.name} failed:[/] {o.error}")


def _parse_epsilons(text: str) -> list[float]:
    """'0.5,1,2,inf' -> [0.5, 1.0, 2.0]; ε = ∞ (no noise) is always evaluated."""
    values = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.lower() in ("inf", "none", "∞"):
            continue
        value = float(part)
        if not value > 0:
            raise ValueError(f"epsilon {part!r} must be > 0 (or 'inf')")
        values.append(value)
    return sorted(set(values))


@cli.command()
def evaluate(
    dataset: Annotated[
        str, typer.Option(help="frcsub | assist0910 | uci | gsm8k | synthetic | a folder with qmatrix.csv + responses.csv")
    ] = "frcsub",
    protocol: Annotated[str, typer.Option(help="paper | heldout | simulated")] = "paper",
    entities: Annotated[
        str, typer.Option(help="comma-separated: configured entities (smollm2, gemma3, ...) and/or sim:confident, sim:conservative, sim:specialist")
    ] = "sim:confident,sim:conservative,sim:specialist",
    max_students: Annotated[Optional[int], typer.Option(help="subsample the dataset (seeded)")] = None,
    max_items: Annotated[
        Optional[int], typer.Option(help="keep each student's first N responses (small models' context)")
    ] = None,
    epsilons: Annotated[str, typer.Option(help="noise levels; inf = no noise")] = "0.5,1,2,inf",
    seed: Annotated[int, typer.Option(help="seed for subsampling, splits, hold-outs and noise")] = 0,
    method: Annotated[str, typer.Option(help="calibration for the RC rows: paper | bias | stacking")] = "bias",
    sensitivity: Annotated[str, typer.Option(help="paper (Δ=K) or assessed")] = "paper",
    n_simulated: Annotated[int, typer.Option(help="simulated protocol: students per generator")] = 500,
    data_dir: Annotated[Optional[Path], typer.Option(help="folder holding the public datasets")] = None,
    out: Annotated[Path, typer.Option("--out", help="output folder")] = Path("reports/evaluation"),
    privacy_frontier: Annotated[
        bool, typer.Option("--privacy-frontier", help="MAE and held-out AUC against ε for every mechanism, ± post-processing")
    ] = False,
    datasets: Annotated[str, typer.Option(help="--privacy-frontier: comma-separated datasets")] = "frcsub,assist0910,simulated",
    mechanisms: Annotated[Optional[str], typer.Option(help="--privacy-frontier: comma-separated mechanisms (default all)")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="--privacy-frontier: noise draws per setting")] = 3,
) -> None:
    """Evaluate the federation against baselines; writes results.json, report.md and plots to OUT."""
    if privacy_frontier:
        _frontier(datasets, entities, epsilons, mechanisms, seed, sensitivity, max_students, max_items, n_simulated, repeats, data_dir, out)
        return
    import shlex

    from app.federation import Federation
    from calibration.evaluation.datasets import load_dataset
    from calibration.evaluation.protocols import PROTOCOLS, evaluate as run_evaluation
    from calibration.evaluation.report import write_report
    from calibration.evaluation.splits import split_students
    from providers.simulated import simulated_family

    if dataset == "gsm8k":
        _evaluate_extraction(entities, max_students or 50, data_dir, out)
        return
    if protocol not in PROTOCOLS:
        err.print(f"[red]error:[/] --protocol must be one of {', '.join(PROTOCOLS)}")
        raise typer.Exit(2)
    try:
        eps = _parse_epsilons(epsilons)
        data = load_dataset(dataset, data_dir=data_dir, max_students=max_students, max_items=max_items, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    names = [n.strip() for n in entities.split(",") if n.strip()]
    settings = Settings()
    sims = simulated_family(seed=seed)
    configured = [s for s in settings.entity_specs if s.name in names]
    unknown = [n for n in names if n not in sims and n not in {s.name for s in configured}]
    if unknown or not names:
        err.print(f"[red]error:[/] unknown entities: {', '.join(unknown) or '(none given)'}; "
                  f"configured: {', '.join(s.name for s in settings.entity_specs)}; simulated: {', '.join(sims)}")
        raise typer.Exit(2)
    n_eval = n_simulated if protocol == "simulated" else len(data.students)
    split = split_students(list(range(n_eval)), seed=seed)  # type: ignore[arg-type]
    total = (len(split.validation) + len(split.test)) * (1 + 2 * len(eps)) * (2 if protocol == "simulated" else 1)

    async def run() -> object:
        federation = Federation(configured)
        try:
            chosen = {n: sims[n] if n in sims else federation.pipeline.entities[n] for n in names}
            with Progress(TextColumn(f"evaluating {dataset}/{protocol}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as bar:
                task = bar.add_task("requests", total=total)
                return await run_evaluation(
                    data, chosen, protocol=protocol, epsilons=eps, seed=seed, method=method, sensitivity=sensitivity,
                    n_simulated=n_simulated, progress=lambda k: bar.advance(task, k),
                )
        finally:
            await federation.aclose()

    try:
        result = asyncio.run(run())
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    # Rebuilt from the parsed options (not sys.argv) so it always names every setting used.
    args = ["evaluate", "--dataset", dataset, "--protocol", protocol, "--entities", ",".join(names),
            "--epsilons", ",".join([*(f"{e:g}" for e in eps), "inf"]), "--seed", str(seed), "--method", method,
            "--sensitivity", sensitivity, "--out", str(out)]
    if max_students is not None:
        args += ["--max-students", str(max_students)]
    if max_items is not None:
        args += ["--max-items", str(max_items)]
    if protocol == "simulated":
        args += ["--n-simulated", str(n_simulated)]
    command = "fedcd " + " ".join(shlex.quote(a) for a in args)
    written = write_report(result, out, command=command)  # type: ignore[arg-type]
    console.print(f"wrote {', '.join(str(p) for p in written)}")


def _frontier(datasets: str, entities: str, epsilons: str, mechanisms: str | None, seed: int, sensitivity: str,  # noqa: PLR0913
              max_students: int | None, max_items: int | None, n_simulated: int, repeats: int, data_dir: Path | None, out: Path) -> None:
    """The privacy–utility frontier (SIMULATED hosted entities unless configured ones are named)."""
    from calibration.evaluation.frontier import DEFAULT_EPSILONS, frontier_command, frontier_datasets, progress_total, run_privacy_frontier
    from privacy import MECHANISM_NAMES
    from providers.simulated import simulated_family

    try:
        eps = _parse_epsilons(epsilons) if epsilons != "0.5,1,2,inf" else list(DEFAULT_EPSILONS)
        mechs = [m.strip() for m in mechanisms.split(",")] if mechanisms else list(MECHANISM_NAMES)
        unknown = [m for m in mechs if m not in MECHANISM_NAMES]
        if unknown:
            raise ValueError(f"unknown mechanisms: {', '.join(unknown)} (use {', '.join(MECHANISM_NAMES)})")
        names = [d.strip() for d in datasets.split(",") if d.strip()]
        sims = simulated_family(seed=seed)
        chosen = [n.strip() for n in entities.split(",") if n.strip()]
        if any(n not in sims for n in chosen):
            raise ValueError("the frontier runs on the SIMULATED hosted family (sim:*): real LLMs are too slow for 6 mechanisms × 7 ε on a CPU")
        frontier_sets = frontier_datasets(names, data_dir=data_dir, max_students=max_students or 300, max_items=max_items or 30,
                                          n_simulated=n_simulated, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    total = progress_total(frontier_sets, n_epsilons=len(eps), n_mechanisms=len(mechs), repeats=repeats, seed=seed)
    command = frontier_command(out=out, datasets=names, entities=chosen, epsilons=eps, mechanisms=mechs, seed=seed,
                               sensitivity=sensitivity, max_students=max_students or 300, max_items=max_items or 30,
                               n_simulated=n_simulated, repeats=repeats)

    async def run() -> list[Path]:
        with Progress(TextColumn("privacy frontier"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as bar:
            task = bar.add_task("rows", total=total)
            _, paths = await run_privacy_frontier(
                out, datasets=names, entities={n: sims[n] for n in chosen}, epsilons=eps, mechanisms=mechs, seed=seed,
                sensitivity=sensitivity, max_students=max_students or 300, max_items=max_items or 30, n_simulated=n_simulated,
                repeats=repeats, data_dir=data_dir, progress=lambda k: bar.advance(task, k), command=command,
            )
            return paths

    paths = asyncio.run(run())
    console.print(f"wrote {', '.join(str(p) for p in paths)}")


def _evaluate_extraction(entities: str, n_problems: int, data_dir: Path | None, out: Path) -> None:
    """GSM8K has no students: evaluate Q-matrix extraction (keyword vs LLM tagging agreement)."""
    from dataclasses import asdict

    from app.federation import Federation
    from calibration.extraction import extract_qmatrix
    from qmatrix.extract import GSM8K_CONCEPTS, load_gsm8k_problems

    names = [n.strip() for n in entities.split(",") if n.strip() and not n.strip().startswith("sim:")]
    settings = Settings()
    specs = [s for s in settings.entity_specs if s.name in names]
    if not specs:
        err.print("[red]error:[/] gsm8k evaluates LLM tagging: name configured LLM entities with --entities (e.g. smollm2,gemma3)")
        raise typer.Exit(2)
    try:
        problems = load_gsm8k_problems(data_dir, limit=n_problems)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    items = [(p["id"], p["question"]) for p in problems]

    async def run() -> tuple[object, object]:
        federation = Federation(specs)
        try:
            with console.status(f"tagging {len(items)} GSM8K problems with {', '.join(s.name for s in specs)}"):
                return await extract_qmatrix("gsm8k", items, GSM8K_CONCEPTS, method="both", entities=federation.pipeline.entities)
        finally:
            await federation.aclose()

    extraction, agreement = asyncio.run(run())
    out.mkdir(parents=True, exist_ok=True)
    counts = {c: sum(c in t for t in extraction.tags.values()) for c in GSM8K_CONCEPTS}  # type: ignore[attr-defined]
    data = {
        "dataset": "gsm8k", "protocol": "extraction", "n_problems": len(items), "entities": [s.name for s in specs],
        "agreement": asdict(agreement), "llm_tag_counts": counts,  # type: ignore[call-overload]
        "untagged_items": extraction.untagged_items, "failures": extraction.failures,  # type: ignore[attr-defined]
        "rows": [],
    }
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# fedcd evaluation: GSM8K Q-matrix extraction", "",
        f"Reproduce: `fedcd evaluate --dataset gsm8k --entities {','.join(s.name for s in specs)} --max-students {n_problems} --out {out}`", "",
        f"{len(items)} problems; keyword tagging vs LLM tagging ({', '.join(s.name for s in specs)}, answers averaged, tag at ≥ 0.5).", "",
        f"Overall agreement {agreement.percent:.3f}, Cohen's κ {agreement.kappa if agreement.kappa is None else round(agreement.kappa, 3)}.", "",  # type: ignore[attr-defined]
        "| concept | agreement | κ | LLM-tagged problems |", "|---|---|---|---|",
    ]
    for c, v in agreement.per_concept.items():  # type: ignore[attr-defined]
        kappa = "—" if v["kappa"] is None else f"{v['kappa']:.3f}"
        lines.append(f"| {c} | {v['percent']:.3f} | {kappa} | {counts[c]} |")
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    console.print(f"wrote {out / 'results.json'}, {out / 'report.md'}")


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
) -> None:
    """Train the federated local model (FedAvg across simulated institutions) and publish it, signed."""
    from calibration.evaluation.datasets import load_dataset
    from federated import train_federated

    aggregation = {"trimmed": "trimmed_mean"}.get(aggregation, aggregation)
    problems = []
    if dp not in ("none", "student", "client"):
        problems.append("--dp must be none, student or client")
    if dp != "none" and epsilon is None:
        problems.append("--epsilon is required with --dp student|client")
    if dp == "none" and epsilon is not None:
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
    table = Table(title=f"federated training on {data.name} ({'SIMULATED' if data.simulated else 'real'} data), {clients} clients")
    for column in ("round", "loss", "held-out AUC", "ε spent", "bytes sent", "seconds"):
        table.add_column(column, justify="right")
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task("rounds", total=rounds)

        def on_round(record: object) -> None:
            r = record  # federated.RoundRecord
            table.add_row(
                str(r.round), f"{r.train_loss:.4f}", f"{r.auc:.4f}",  # type: ignore[attr-defined]
                "—" if r.epsilon is None else f"{r.epsilon:.3f}", f"{r.bytes_sent:,}", f"{r.seconds:.2f}",  # type: ignore[attr-defined]
            )
            bar.advance(task)

        try:
            if engine == "flower":
                result = _train_with_flower(
                    data, registry, clients=clients, rounds=rounds, dp=dp, epsilon=epsilon, delta=delta, secagg=secagg,
                    aggregation=aggregation, partition=partition, alpha=alpha, seed=seed, deployment=deployment,
                    progress=on_round, force=force,
                )
            else:
                result = train_federated(
                    dataset=data, registry=registry, clients=clients, rounds=rounds, dp=dp, epsilon=epsilon, delta=delta,  # type: ignore[arg-type]
                    aggregation=aggregation, partition=partition, alpha=alpha, seed=seed, progress=on_round, force=force,  # type: ignore[arg-type]
                )
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

    from federated.flower import train_flower
    from federated.publish import publish_trained

    with tempfile.TemporaryDirectory(prefix="fedcd-flower-") as work:
        fed = train_flower(dataset=data, out_dir=Path(work), progress=progress, **options)
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
    from calibration.evaluation.datasets import load_dataset
    from federated.benchmark import compare_training, write_comparison

    eps = _parse_epsilons(epsilons)
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


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
