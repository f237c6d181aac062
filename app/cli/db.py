"""`fedcd db upgrade|current`: the state database's schema (Alembic migrations)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import cli, console, err

db_cli = typer.Typer(help="the state database: schema migrations")
cli.add_typer(db_cli, name="db")


def _engine():  # type: ignore[no-untyped-def]
    from sqlalchemy import create_engine

    from app.settings import Settings

    return create_engine(Settings().db_url)


@db_cli.command("upgrade")
def upgrade_db(revision: Annotated[str, typer.Option(help="target revision")] = "head") -> None:
    """Migrate FEDCD_DATABASE_URL's schema (under the start-up lock: safe while workers start)."""
    from app.migrate import SchemaOutdated, upgrade
    from app.pseudonyms import server_secret
    from app.settings import Settings

    engine = _engine()
    try:  # the server's secret: revision 0004 turns stored student ids into keyed hashes under it (app.pseudonyms)
        before, after = upgrade(engine, revision, server_secret=server_secret(Settings()))
    except SchemaOutdated as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    finally:
        engine.dispose()
    console.print(f"schema: {before or '(empty)'} -> {after}")


@db_cli.command("current")
def current_db() -> None:
    """Print the schema revision and the one this fedcd needs."""
    from app.migrate import head_revision, schema_revision

    engine = _engine()
    try:
        console.print(f"database: {schema_revision(engine) or '(empty)'}; this fedcd: {head_revision()}")
    finally:
        engine.dispose()
