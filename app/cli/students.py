"""`fedcd students export|erase`: a student's data rights from the operator's shell, on the server's database
(README "Student data"). The same service as ``GET /v1/students/{id}/export`` and ``DELETE /v1/students/{id}``."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from app.cli.common import cli, console, err

students_cli = typer.Typer(help="a student's stored data: export it, or erase it (the privacy spend is kept)")
cli.add_typer(students_cli, name="students")

_TENANT = typer.Option(help="the tenant the student belongs to")
_STUDENT = typer.Argument(help="the student id, as the tenant's platform sends it")


async def _run(action: str, tenant: str, student_id: str) -> dict[str, Any]:
    from app.db import Database
    from app.domain_errors import DomainError
    from app.federation import response_cache
    from app.pseudonyms import Pseudonyms, existing_server_secret, secret_path
    from app.services.students import StudentDataService
    from app.settings import Settings
    from app.storage import PolicyStore, UsageStore, budget_rule, default_policy
    from app.storage.retention import RetentionStore
    from privacy import PrivacyLedger

    settings = Settings()
    # Never a new secret: under one no stored student would be found, and an erasure would report "removed 0" for a
    # student whose data is all still there (a mistyped FEDCD_STATE_DIR, another host's folder).
    secret = existing_server_secret(settings)
    if secret is None:
        err.print(f"[red]error:[/] no server secret found: FEDCD_SECRET_KEY is unset and {secret_path(settings)} does "
                  "not exist (or holds fewer than 32 bytes). Run this with the server's own FEDCD_SECRET_KEY, "
                  "FEDCD_SECRET_FILE or FEDCD_STATE_DIR; nothing was exported or erased", soft_wrap=True)
        raise typer.Exit(2)
    pseudonyms = Pseudonyms(secret)
    database = Database(settings.db_url, upgrade=settings.db_upgrade_on_start, server_secret=pseudonyms.secret)
    ledger = PrivacyLedger(
        database.sessions, rule=budget_rule(default_policy(settings)), accountant=settings.privacy_accountant,
        repeat_window_s=settings.privacy_repeat_window_s,
    ) if settings.privacy_cap_epsilon is not None else None
    # Only a shared (Redis) cache is within reach of this process; a server's in-process cache is not.
    cache = response_cache(settings) if settings.redis_url is not None else None
    service = StudentDataService(
        sessions=database.sessions, ledger=ledger, pseudonyms=pseudonyms, policies=PolicyStore(database.sessions, settings),
        retention=RetentionStore(database.sessions, settings), usage=UsageStore(database.sessions),
        uploads=settings.state_dir / "uploads", cache=cache.store if cache is not None else None,
    )
    try:
        result = await (service.export if action == "export" else service.erase)(tenant, student_id)
        return result.model_dump(mode="json")
    except DomainError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    finally:
        if cache is not None:
            await cache.store.aclose()
        if ledger is not None:
            ledger.close()
        database.close()


@students_cli.command("export")
def export_student(
    student_id: Annotated[str, _STUDENT], tenant: Annotated[str, _TENANT],
) -> None:
    """Print, as JSON, everything stored about the student: each privacy charge (when, source, ε), the released
    diagnoses still kept, the jobs whose inputs hold the student, the budget now."""
    print(json.dumps(asyncio.run(_run("export", tenant, student_id)), indent=2))


@students_cli.command("erase")
def erase_student(
    student_id: Annotated[str, _STUDENT], tenant: Annotated[str, _TENANT],
    as_json: Annotated[bool, typer.Option("--json", help="print the erasure report as JSON")] = False,
) -> None:
    """Erase the student's stored data (diagnoses, job inputs and results, cached answers); the privacy charges'
    spend is kept under the keyed hash, so the budget is not reset."""
    report = asyncio.run(_run("erase", tenant, student_id))
    if as_json:
        print(json.dumps(report))
        return
    removed = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in report["removed"].items())
    console.print(f"erased for tenant [bold]{tenant}[/]: {removed}")
    for kept in report["kept"]:
        console.print(f"kept: {kept['what']} ({kept['count']}): {kept['why']}")
