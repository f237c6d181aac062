"""`fedcd evaluate`: protocols, the privacy frontier, and GSM8K Q-matrix extraction."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.cli.common import cli, console, err, parse_epsilons
from app.settings import Settings
from evaluation.results import VIA_API_ROW

if TYPE_CHECKING:
    from evaluation.served import ServedConfig


# The settings the served rows are built from (ServedConfig below).
SERVED_SETTINGS = ("default_mechanism", "default_epsilon", "sensitivity", "default_calibration_method")


def served_config(settings: Settings, *, release_epsilon: float | None) -> ServedConfig:
    """The server's defaults (noise, calibration), read from the one Settings object, so a `served` row or a bench
    follows any change of default."""
    from diagnosis import NoiseLevel
    from evaluation.served import ServedConfig

    return ServedConfig(
        noise=NoiseLevel(mechanism=settings.default_mechanism, epsilon=settings.default_epsilon,
                         sensitivity=settings.sensitivity),
        calibration_method=settings.default_calibration_method, aggregation="auto", release_epsilon=release_epsilon,
    )


def reproduce_line(settings: Settings, args: list[str]) -> str:
    """``FEDCD_…=… fedcd <args>``: the served defaults named in front, so the command reproduces the report whatever
    the shipped defaults are when it is rerun."""
    current = settings.model_dump(include=set(SERVED_SETTINGS))
    return " ".join([*(f"FEDCD_{name.upper()}={current[name]}" for name in SERVED_SETTINGS),
                     "fedcd", *(shlex.quote(a) for a in args)])


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
    served: Annotated[
        bool, typer.Option("--served/--no-served", help="heldout/simulated: the served rows, with local-fed trained on the train split")
    ] = True,
    served_release_epsilon: Annotated[
        str, typer.Option(help="ε of the served calibration's DP release; none: released without noise")
    ] = "none",
    served_via_api: Annotated[
        bool, typer.Option("--served-via-api", help="heldout: one more served row, through a fresh gateway process: "
                           "the train and validation students uploaded as a tenant's history, trained, calibrated, "
                           "then validation and test students diagnosed over HTTP")
    ] = False,
    ncdm: Annotated[bool, typer.Option("--ncdm/--no-ncdm", help="fit the NCDM baseline (PyTorch) on the train split")] = True,
    ncdm_batch_size: Annotated[int, typer.Option(min=1, help="NCDM minibatch size")] = 64,
    local_fed_model: Annotated[
        str, typer.Option(help="local-fed's model: auto (every candidate kind, the best on the coordinator's held-out "
                          "students: what upload-and-train serves) | higher-order-irt (v2) | irt-2pl | evidence-encoder "
                          "(v1)")
    ] = "auto",
    local_fed_rounds: Annotated[int, typer.Option(min=0, help="local-fed federated rounds; 0 = untrained")] = 10,
    local_fed_epochs: Annotated[int, typer.Option(min=1, help="local-fed local epochs per round")] = 2,
    local_fed_clients: Annotated[int, typer.Option(min=1, help="local-fed simulated institutions; 1 = centralized")] = 3,
    local_fed_epsilon: Annotated[
        Optional[float], typer.Option(help="local-fed student-level DP-SGD budget ε (default: no DP)")
    ] = None,
    local_fed_ablation: Annotated[
        bool, typer.Option("--local-fed-ablation", help="held-out protocol: local-fed untrained / 1 round / trained, "
                           "centralized / federated, DP ε 1, 2, 8 and v1, against IRT, DINA and NCDM")
    ] = False,
) -> None:
    """Evaluate the federation against baselines; writes results.json, report.md and plots to OUT."""
    if privacy_frontier:
        _frontier(datasets, entities, epsilons, mechanisms, seed, sensitivity, max_students, max_items, n_simulated, repeats, data_dir, out)
        return

    if local_fed_ablation:
        _ablation(dataset, seed, data_dir, max_students, ncdm, ncdm_batch_size, out)
        return

    from app.federation import Federation
    from evaluation.baselines import NCDMSettings
    from qmatrix.catalog import load_dataset
    from evaluation.protocols import PROTOCOLS, EvaluationConfig, evaluate as run_evaluation
    from evaluation.report import write_report
    from evaluation.served import LocalFedTraining
    from qmatrix.splits import split_students
    from providers.simulated import simulated_family

    if dataset == "gsm8k":
        _evaluate_extraction(entities, max_students or 50, data_dir, out)
        return
    if protocol not in PROTOCOLS:
        err.print(f"[red]error:[/] --protocol must be one of {', '.join(PROTOCOLS)}")
        raise typer.Exit(2)
    try:
        eps = parse_epsilons(epsilons)
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
    try:
        release = None if served_release_epsilon == "none" else float(served_release_epsilon)
    except ValueError as exc:
        err.print(f"[red]error:[/] --served-release-epsilon must be a number or none, got {served_release_epsilon!r}")
        raise typer.Exit(2) from exc
    try:
        training = LocalFedTraining(model=local_fed_model, rounds=local_fed_rounds, local_epochs=local_fed_epochs,
                                    clients=local_fed_clients, epsilon=local_fed_epsilon)
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    served_rows = served_config(settings, release_epsilon=release) if served and protocol != "paper" else None
    if served_rows is not None:
        served_rows = dataclasses.replace(served_rows, local_fed=training)
    n_eval = n_simulated if protocol == "simulated" else len(data.students)
    split = split_students(list(range(n_eval)), seed=seed)  # type: ignore[arg-type]
    settings_count = 1 + 2 * len(eps) + (1 if served_rows is not None else 0)
    total = (len(split.validation) + len(split.test)) * settings_count * (2 if protocol == "simulated" else 1)

    via_api = None
    if served_via_api:
        if protocol != "heldout" or served_rows is None:
            err.print("[red]error:[/] --served-via-api needs --protocol heldout and the served rows")
            raise typer.Exit(2)
        if local_fed_rounds < 1:
            err.print("[red]error:[/] --served-via-api trains through the API: --local-fed-rounds must be at least 1")
            raise typer.Exit(2)
        from evaluation.served_api import GatewayDefaults, ServedViaApi
        from providers import EntitySpec

        specs = [s for s in configured if s.name in names] + [
            EntitySpec(name=n, kind="simulated", simulated_style=sims[n].style, seed=seed) for n in names if n in sims]
        defaults = GatewayDefaults(default_mechanism=settings.default_mechanism,
                                   default_epsilon=settings.default_epsilon, sensitivity=settings.sensitivity,
                                   default_calibration_method=settings.default_calibration_method)
        via_api = ServedViaApi(defaults, specs, seed=seed, release_epsilon=release, rounds=local_fed_rounds,
                               progress=lambda m: err.print(f"[dim]served-via-api:[/] {m}"))

    async def run() -> object:
        federation = Federation(configured)
        try:
            chosen = {n: sims[n] if n in sims else federation.pipeline.entities[n] for n in names}
            with Progress(TextColumn(f"evaluating {dataset}/{protocol}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as bar:
                task = bar.add_task("requests", total=total)
                config = EvaluationConfig(
                    protocol=protocol, epsilons=eps, seed=seed, method=method, sensitivity=sensitivity,
                    n_simulated=n_simulated, served=served_rows,
                    ncdm=NCDMSettings(batch_size=ncdm_batch_size, seed=seed) if ncdm else None,
                )
                return await run_evaluation(data, chosen, config, progress=lambda k: bar.advance(task, k),
                                            served_via=via_api)
        finally:
            await federation.aclose()

    try:
        result = asyncio.run(run())
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if via_api is not None:
        result.served["via_api"] = via_api.facts  # type: ignore[attr-defined]
        result.notes.append(  # type: ignore[attr-defined]
            f"`{VIA_API_ROW}`: the train and validation students uploaded as tenant '{via_api.facts.get('tenant')}'s "
            "history to a fresh `fedcd serve` (POST /v1/qmatrices/{id}/train: local-fed trained with one institution, "
            "gated, published, then calibrated on a held-out part of the upload as large as the validation split), "
            "then every validation and test student's observed responses sent to POST /v1/diagnose; "
            f"train job: {via_api.facts.get('train_job')}; diagnoses rested on: {via_api.facts.get('bases')}")
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
    if not served:
        args += ["--no-served"]
    elif release is not None:
        args += ["--served-release-epsilon", f"{release:g}"]
    args += ["--served-via-api"] if via_api is not None else []
    args += ["--ncdm-batch-size", str(ncdm_batch_size)] if ncdm else ["--no-ncdm"]
    if served:
        args += ["--local-fed-model", local_fed_model, "--local-fed-rounds", str(local_fed_rounds),
                 "--local-fed-epochs", str(local_fed_epochs), "--local-fed-clients", str(local_fed_clients)]
        args += ["--local-fed-epsilon", f"{local_fed_epsilon:g}"] if local_fed_epsilon is not None else []
    command = reproduce_line(settings, args) if served_rows is not None else " ".join(
        ["fedcd", *(shlex.quote(a) for a in args)])
    written = write_report(result, out, command=command)  # type: ignore[arg-type]
    console.print(f"wrote {', '.join(str(p) for p in written)}")


def _frontier(datasets: str, entities: str, epsilons: str, mechanisms: str | None, seed: int, sensitivity: str,  # noqa: PLR0913
              max_students: int | None, max_items: int | None, n_simulated: int, repeats: int, data_dir: Path | None, out: Path) -> None:
    """The privacy–utility frontier (SIMULATED hosted entities unless configured ones are named)."""
    from evaluation.frontier import (DEFAULT_EPSILONS, FrontierDatasets, FrontierSettings, frontier_command,
                                     progress_total, run_privacy_frontier)
    from privacy import MECHANISM_NAMES
    from providers.simulated import simulated_family

    try:
        eps = parse_epsilons(epsilons) if epsilons != "0.5,1,2,inf" else list(DEFAULT_EPSILONS)
        mechs = [m.strip() for m in mechanisms.split(",")] if mechanisms else list(MECHANISM_NAMES)
        unknown = [m for m in mechs if m not in MECHANISM_NAMES]
        if unknown:
            raise ValueError(f"unknown mechanisms: {', '.join(unknown)} (use {', '.join(MECHANISM_NAMES)})")
        names = [d.strip() for d in datasets.split(",") if d.strip()]
        sims = simulated_family(seed=seed)
        chosen = [n.strip() for n in entities.split(",") if n.strip()]
        if any(n not in sims for n in chosen):
            raise ValueError("the frontier runs on the SIMULATED hosted family (sim:*): real LLMs are too slow for 6 mechanisms × 7 ε on a CPU")
        plan = FrontierSettings(epsilons=eps, mechanisms=mechs, seed=seed, sensitivity=sensitivity, repeats=repeats)
        data = FrontierDatasets(names=names, max_students=max_students or 300, max_items=max_items or 30,
                                n_simulated=n_simulated, data_dir=data_dir)
        frontier_sets = data.load(seed)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    total = progress_total(frontier_sets, n_epsilons=len(eps), n_mechanisms=len(mechs), repeats=repeats, seed=seed)
    command = frontier_command(out, plan, data, chosen)

    async def run() -> list[Path]:
        with Progress(TextColumn("privacy frontier"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as bar:
            task = bar.add_task("rows", total=total)
            _, paths = await run_privacy_frontier(
                out, plan, data, entities={n: sims[n] for n in chosen}, progress=lambda k: bar.advance(task, k),
                command=command,
            )
            return paths

    paths = asyncio.run(run())
    console.print(f"wrote {', '.join(str(p) for p in paths)}")


def _evaluate_extraction(entities: str, n_problems: int, data_dir: Path | None, out: Path) -> None:
    """GSM8K has no students: evaluate Q-matrix extraction (keyword vs LLM tagging agreement)."""
    from dataclasses import asdict

    from app.federation import Federation
    from diagnosis.extraction import extract_qmatrix
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
                return await extract_qmatrix("gsm8k", items, GSM8K_CONCEPTS, method="both", entities=federation.pipeline.entities,
                                            ask=federation.pipeline.ask)
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


def _ablation(dataset: str, seed: int, data_dir: Path | None, max_students: int | None, ncdm: bool,
              ncdm_batch_size: int, out: Path) -> None:
    from evaluation.ablation import run_ablation
    from evaluation.ablation_report import write_ablation_report
    from evaluation.baselines import NCDMSettings
    from qmatrix.catalog import load_dataset

    try:
        data = load_dataset(dataset, data_dir=data_dir, max_students=max_students, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    result = run_ablation(data, seed=seed, ncdm=NCDMSettings(batch_size=ncdm_batch_size, seed=seed) if ncdm else None,
                          progress=lambda message: err.print(f"[dim]{message}[/]"))
    args = ["fedcd", "evaluate", "--dataset", dataset, "--local-fed-ablation", "--seed", str(seed), "--out", str(out)]
    if max_students is not None:
        args += ["--max-students", str(max_students)]
    args += ["--ncdm-batch-size", str(ncdm_batch_size)] if ncdm else ["--no-ncdm"]
    written = write_ablation_report(result, out, command=" ".join(shlex.quote(a) for a in args))
    console.print(f"wrote {', '.join(str(p) for p in written)}")

