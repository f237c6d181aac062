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
    from app.pseudonyms import existing_server_secret
    from app.settings import Settings

    engine = _engine()
    # The server's secret: revision 0004 turns stored student ids into keyed hashes under it (app.pseudonyms). Never
    # a new one: ids hashed under a secret the server does not hold would re-key every student (a fresh budget each);
    # without it the revision refuses when it has ids to convert, and a database with none needs no secret.
    try:
        before, after = upgrade(engine, revision, server_secret=existing_server_secret(Settings()))
    except (SchemaOutdated, RuntimeError) as exc:  # RuntimeError: a revision refused (0004 without the secret)
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
