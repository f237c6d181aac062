"""`fedcd keys create|list|revoke`: API keys, managed by the operator on the server's database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Optional

import typer
from rich.table import Table

from app.cli.common import cli, console, err

keys_cli = typer.Typer(help="API keys: create (shown once), list (never the key), revoke")
cli.add_typer(keys_cli, name="keys")


def _store():  # type: ignore[no-untyped-def]
    from app.auth import KeyStore
    from app.db import Database
    from app.settings import Settings

    return KeyStore(Database(Settings().db_url).sessions)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if ts is not None else "—"


@keys_cli.command("create")
def create_key(
    tenant: Annotated[str, typer.Option(help="the tenant the key acts for (created if new)")],
    role: Annotated[str, typer.Option(help="client | admin")] = "client",
    expires_days: Annotated[Optional[float], typer.Option(help="expire after N days (default: never)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help='print {"tenant","role","key_id","api_key"}')] = False,
) -> None:
    """Create a key and print it once; only its hash is stored."""
    try:
        new = _store().create(tenant=tenant, role=role, expires_days=expires_days)  # type: ignore[arg-type]
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if as_json:
        print(json.dumps({"tenant": new.tenant, "role": new.role, "key_id": new.key_id, "api_key": new.api_key}))
        return
    console.print(f"created {new.role} key [bold]{new.key_id}[/] for tenant [bold]{new.tenant}[/]"
                  + (f", expires {_when(new.expires_at)}" if new.expires_at else ""))
    console.print("The key is shown once; store it now:")
    print(new.api_key, flush=True)


@keys_cli.command("list")
def list_keys(
    tenant: Annotated[Optional[str], typer.Option(help="only this tenant's keys")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List keys (ids, tenants, roles, dates) — never the keys themselves."""
    rows = _store().list(tenant)
    if as_json:
        print(json.dumps([vars(r) for r in rows]))
        return
    table = Table("key id", "tenant", "role", "created", "expires", "last used", "state")
    for r in rows:
        table.add_row(r.key_id, r.tenant, r.role, _when(r.created_at), _when(r.expires_at), _when(r.last_used_at),
                      "revoked" if r.revoked else "active")
    console.print(table)


@keys_cli.command("revoke")
def revoke_key(key_id: Annotated[str, typer.Argument(help="the key id shown by `fedcd keys list`")]) -> None:
    """Revoke a key: it fails from the next request on, in every worker."""
    if not _store().revoke(key_id):
        err.print(f"[red]error:[/] no key with id {key_id!r}")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")
