"""The ledger tests run on both engines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """Every ledger test runs on both engines: an SQLite file, and a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield tmp_path / "ledger.db"
        return
    from tests.postgres import fresh_postgres

    with fresh_postgres() as url:
        yield url


