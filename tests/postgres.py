"""A fresh PostgreSQL database per test (or module), dropped after.

The server is the machine's PostgreSQL at 127.0.0.1:5432 (``FEDCD_TEST_POSTGRES_URL`` overrides the admin URL).
Where it cannot be reached the tests skip — except in CI (``CI=true``), where they fail: CI must never pass
without having run them.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

__all__ = ["ADMIN_URL", "fresh_postgres"]

ADMIN_URL = os.environ.get("FEDCD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI and is unavailable: {reason}")
    pytest.skip(f"PostgreSQL unavailable: {reason}")


@contextlib.contextmanager
def fresh_postgres() -> Iterator[str]:
    """Create ``fedcd_test_<random>``, yield its URL, drop it (terminating leftover connections)."""
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"fedcd_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        _unavailable(str(exc).splitlines()[0])
    try:
        yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
