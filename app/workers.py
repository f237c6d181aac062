"""The gateway's worker processes: who is alive, so that a dead one's work is taken over.

Each worker registers a row (host, pid) and heartbeats it. A worker is *live* while its heartbeat
is fresh — and, for workers on this host, while its process exists (so a restart on the same
machine takes over at once instead of waiting for the heartbeat to go stale). Jobs claimed by a
dead worker are claimed again (``app.jobs.runner``); pending privacy charges of a dead worker are
refunded (``PrivacyLedger.settle_orphans``).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable

from sqlalchemy import delete, select, update
from sqlalchemy.orm import sessionmaker

from app.db import WorkerRow

__all__ = ["WorkerRegistry"]


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerRegistry:
    def __init__(
        self, sessions: sessionmaker, *, stale_s: float = 30.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.sessions, self.stale_s, self._clock = sessions, stale_s, clock
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.id = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"

    def register(self) -> None:
        now = self._clock()
        with self.sessions.begin() as session:
            session.add(WorkerRow(id=self.id, host=self.host, pid=self.pid, started_at=now, heartbeat_at=now))

    def heartbeat(self) -> None:
        with self.sessions.begin() as session:
            session.execute(update(WorkerRow).where(WorkerRow.id == self.id).values(heartbeat_at=self._clock()))

    def deregister(self) -> None:
        with self.sessions.begin() as session:
            session.execute(delete(WorkerRow).where(WorkerRow.id == self.id))

    def live_ids(self) -> set[str]:
        """Workers with a fresh heartbeat (and, on this host, a running process); always includes this one."""
        cutoff = self._clock() - self.stale_s
        with self.sessions() as session:
            rows = session.execute(select(WorkerRow.id, WorkerRow.host, WorkerRow.pid, WorkerRow.heartbeat_at)).all()
        live = {self.id}
        for worker_id, host, pid, heartbeat_at in rows:
            if heartbeat_at >= cutoff and (host != self.host or _process_exists(pid)):
                live.add(worker_id)
        return live

    def forget_dead(self, *, older_than_s: float = 86400.0) -> None:
        """Drop rows of workers silent for a day (their work was taken over long ago)."""
        with self.sessions.begin() as session:
            session.execute(delete(WorkerRow).where(WorkerRow.heartbeat_at < self._clock() - older_than_s))
