"""`fedcd diagnose`: the diagnosis pipeline in-process, over a responses file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli.common import cli, console, err
from app.settings import Settings
from qmatrix import QMatrixError, load_qmatrix, load_responses_csv

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
    federation_name: Annotated[
        Optional[str], typer.Option("--federation", help="all | selective (tier by tier; default: the server's)")
    ] = None,
) -> None:
    """Diagnose every student in RESPONSES with the configured federation, in-process."""
    from app.federation import Federation, federation_mode
    from diagnosis import AllEntitiesFailed, DiagnosisRequest, UnknownEntities

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
    try:
        tiering = federation_mode(federation_name, settings)
    except ValueError as exc:
        err.print(f"[red]error:[/] --federation: {exc}")
        raise typer.Exit(2) from exc

    async def run() -> list[object]:
        from calibration import aggregator_for

        federation = Federation(settings.entity_specs, seed=seed if seed is not None else settings.noise_seed)
        aggregator = aggregator_for(None, alpha=settings.alpha, aggregation=aggregation)
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
                        federation=tiering,
                        deadline_s=settings.request_deadline_s or federation.deadline_s(names),
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


def _jsonable(value: object) -> object:
    """What ``json.dumps`` cannot write itself: the typed values inside a result (e.g. an entity's uncertainty)."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _print(results: list[object], *, as_json: bool, show_entities: bool) -> None:
    from dataclasses import asdict

    from diagnosis import AllEntitiesFailed

    if as_json:
        out = [
            {"error": str(r), "entities": [asdict(o) for o in r.outcomes]} if isinstance(r, AllEntitiesFailed) else asdict(r)  # type: ignore[call-overload]
            for r in results
        ]
        console.print_json(json.dumps(out, default=_jsonable))
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


