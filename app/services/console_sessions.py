"""What the operator console's sign-in keeps server-side (``app.console.session`` signs and checks the cookies): its
secret, and each admin key's session generation — a counter in the database (``config_generations``, under the
reserved name ``console-session:<key id>``: no tenant name holds a ``:``), so every worker and host sees a sign-out
at once."""

from __future__ import annotations

import functools

from sqlalchemy.orm import sessionmaker

from app.db import engine_of
from app.pseudonyms import console_secret
from app.settings import Settings
from app.storage.generations import bump, read_generations

__all__ = ["ConsoleSessions"]

_GENERATION = "console-session:"


class ConsoleSessions:
    def __init__(self, sessions: sessionmaker, settings: Settings) -> None:
        self.sessions, self.settings = sessions, settings

    @functools.cached_property
    def secret(self) -> bytes:
        """The key console sessions and forms are signed under (``FEDCD_CONSOLE_SECRET_KEY``, else
        ``<state_dir>/console-secret``): read, or created, once per process."""
        return console_secret(self.settings)

    def generation(self, key_id: str) -> int:
        """The key's session generation now (0 before its first sign-out). Blocking: call it from a worker thread."""
        with engine_of(self.sessions).connect() as conn:
            return read_generations(conn, _GENERATION + key_id)[0]

    def end(self, key_id: str) -> None:
        """End every console session opened with the key so far, copies of their cookies included (sign-out).
        Blocking: call it from a worker thread."""
        with self.sessions.begin() as session:
            bump(session, _GENERATION + key_id)
