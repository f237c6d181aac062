"""One lock across every worker process, for start-up work that must happen once (migrations, the dev key,
the default model, the default calibration).

* PostgreSQL: a session-level advisory lock (``pg_advisory_lock``), released when the holder
  disconnects — also when its process dies.
* SQLite (one machine by nature): an OS lock (``flock``) on a file beside the database, which the
  kernel releases when the holder dies. A lock *row* would need an expiry and renewal to survive a
  crashed holder; the file lock has neither problem.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

__all__ = ["database_lock"]


def _key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def database_lock(engine: Engine, name: str) -> Iterator[None]:
    """Hold the lock ``name`` for this database while the block runs (blocks until it is free)."""
    url = make_url(engine.url)
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if not database or database == ":memory:":
            yield
            return
        path = Path(f"{database}.{name}.lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _key(name)})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _key(name)})
            conn.commit()
