"""`fedcd privacy budget`: what the default privacy policy means, per diagnosis, per day and per year."""

from __future__ import annotations

import json
import math
from typing import Annotated, Optional

import typer
from rich.table import Table

from app.cli.common import cli, console

privacy_cli = typer.Typer(help="the privacy policy's meaning in numbers")
cli.add_typer(privacy_cli, name="privacy")

DAYS_PER_YEAR = 365


def budget_table(*, entities: int, epsilon: float, cap: float, period_days: float | None) -> dict[str, float | int | None]:
    """Per diagnosis, per period and per year, under basic composition (exact for pure ε-DP releases)."""
    per_diagnosis = entities * epsilon
    per_period = math.floor(cap / per_diagnosis * (1 + 1e-9)) if per_diagnosis > 0 else 0
    per_day = None if period_days is None else per_period / period_days
    return {
        "entities": entities,
        "epsilon_per_answer": epsilon,
        "epsilon_per_diagnosis": per_diagnosis,
        "diagnoses_per_period": per_period,
        "epsilon_per_period": per_period * per_diagnosis,
        "diagnoses_per_day": per_day,
        "epsilon_per_year": None if per_day is None else DAYS_PER_YEAR * per_day * per_diagnosis,
    }


@privacy_cli.command("budget")
def privacy_budget(
    entities: Annotated[Optional[int], typer.Option(help="entities asked per diagnosis (default: the configured federation)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The default policy (FEDCD_PRIVACY_*, FEDCD_DEFAULT_*) in numbers: ε per diagnosis, per period, per year."""
    from app.settings import Settings

    settings = Settings()
    # The configured federation as the gateway builds it: a declared entity missing its key is not counted.
    members = [s.name for s in settings.entity_specs]
    count = entities if entities is not None else len(members)
    period_days = {"rolling": settings.privacy_window_s / 86400, "day": 1.0, "week": 7.0}.get(settings.privacy_period)
    cap = settings.privacy_cap_epsilon if settings.privacy_cap_epsilon is not None else math.inf
    table = budget_table(entities=count, epsilon=settings.default_epsilon, cap=cap, period_days=period_days)
    table.update(period=settings.privacy_period, cap_epsilon=cap, mechanism=settings.default_mechanism,
                 sensitivity=settings.sensitivity)
    federation = {
        "entity_names": None if entities is not None else members,
        "dropped_entities": [{"name": d.name, "reason": d.reason} for d in settings.dropped_entities],
    }
    if as_json:
        print(json.dumps({**table, **federation}))
        return
    out = Table(title=f"default policy: {settings.default_mechanism}, ε {settings.default_epsilon:g} per entity answer, "
                      f"Δ {settings.sensitivity}, cap {cap:g} per {settings.privacy_period} period")
    out.add_column("")
    out.add_column("value", justify="right")
    for key, value in table.items():
        out.add_row(key.replace("_", " "), "—" if value is None else f"{value:g}" if isinstance(value, float) else str(value))
    console.print(out)
    if entities is None:
        console.print(f"entities counted: {', '.join(members) or '(none)'}")
    for dropped in settings.dropped_entities:
        console.print(f"not counted: {dropped.name} ({dropped.reason})")
