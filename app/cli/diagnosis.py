"""`fedcd serve` and `fedcd diagnose`: the gateway, and the same pipeline in-process."""

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
from qmatrix import EXAMPLE_QMATRIX_ID, QMatrixError, load_qmatrix, load_responses_csv

_CURL = """curl -s http://{host}:{port}/v1/diagnose -H "Authorization: Bearer {key}" -H 'content-type: application/json' -d '{{
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

    from app.bootstrap import read_dev_key
    from app.logs import configure_logging

    try:
        settings = Settings(host=host, port=port)
    except ValueError as exc:  # e.g. FEDCD_AUTH=disabled on a non-loopback bind
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    configure_logging(settings.log_level)

    def announce() -> None:
        console.print(f"[bold green]fedcd is ready[/] on http://{host}:{port} (docs: http://{host}:{port}/docs)")
        key = "$FEDCD_API_KEY" if settings.auth == "enabled" else "auth-disabled"
        if settings.auth == "enabled" and (dev_key := read_dev_key(settings.state_dir)) is not None:
            key = dev_key
            console.print(f"Admin key of tenant 'dev' (saved in {settings.state_dir / 'dev-api-key'}):")
        # Plain print: rich would re-wrap the command and break it for pasting.
        print("Try it:\n" + _CURL.format(host=host, port=port, qid=EXAMPLE_QMATRIX_ID, key=key), flush=True)

    console.print(f"Starting fedcd; loading entities: {', '.join(s.name for s in settings.entity_specs)} ...")
    # access_log off: the gateway writes its own access line, with route templates instead of raw paths
    # (no student id from a URL ever reaches a log).
    uvicorn.run(create_app(settings, on_ready=announce), host=host, port=port, log_level="info", access_log=False)


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

    from diagnosis import AllEntitiesFailed

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


