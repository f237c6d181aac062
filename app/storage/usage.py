"""Entity usage per tenant: one row per entity asked in a diagnosis, summed by ``GET /v1/usage``.

A diagnosis's rows are recorded after the pipeline ran — whether or not an entity answered: a failed call is
a call (with the tokens its provider billed before failing, often 0). Skipped entities (not asked) and repeats
(the stored answer) record nothing. Rows of a calibration job carry its id, so the job reports its own total.

Rows are written in batches — group commit: :meth:`UsageStore.record` only buffers, and the buffer goes in with
one ``INSERT`` once it is ``flush_s`` old or ``max_rows`` long (the request that finds it due writes it), at every
maintenance tick of the gateway and at shutdown; every read of this process writes its buffer first. A request
thus pays no transaction (and no fsync) for its usage. The price: a worker killed with ``kill -9`` loses the rows
of its last ``flush_s`` (usage is accounting — the privacy ledger is written before every release, never
batched), and another worker's reads see a row up to ``flush_s`` late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, case, func, insert, select
from sqlalchemy.orm import sessionmaker

from app.db import UsageRow
from app.schemas import EntityUsage, Usage, UsageReport
from diagnosis import EntityOutcome

__all__ = ["UsageSource", "UsageStore", "entity_usage", "usage_total"]

UsageSource = Literal["diagnosis", "cohort", "calibration", "extraction"]


def _asked(outcomes: Sequence[EntityOutcome]) -> list[EntityOutcome]:
    return [o for o in outcomes if o.status != "skipped"]


def entity_usage(outcome: EntityOutcome) -> EntityUsage:
    return EntityUsage(
        prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens, cost_usd=outcome.cost_usd
    )


def usage_total(outcomes: Sequence[EntityOutcome]) -> Usage:
    """The usage of entity outcomes, summed."""
    asked = _asked(outcomes)
    return Usage(
        calls=len(asked),
        prompt_tokens=sum(o.prompt_tokens for o in asked),
        completion_tokens=sum(o.completion_tokens for o in asked),
        cost_usd=sum(o.cost_usd for o in asked),
        cache_hits=sum(1 for o in asked if o.cache == "hit"),
        cache_misses=sum(1 for o in asked if o.cache == "miss"),
    )


# The sums of a Usage, in its field order after ``calls``.
_SUMS: tuple[ColumnElement[Any], ...] = (
    func.count(),
    func.coalesce(func.sum(UsageRow.prompt_tokens), 0),
    func.coalesce(func.sum(UsageRow.completion_tokens), 0),
    func.coalesce(func.sum(UsageRow.cost_usd), 0.0),
    func.coalesce(func.sum(case((UsageRow.cache == "hit", 1), else_=0)), 0),
    func.coalesce(func.sum(case((UsageRow.cache == "miss", 1), else_=0)), 0),
)


def _usage(sums: Sequence[Any]) -> Usage:
    calls, prompt, completion, cost, hits, misses = sums
    return Usage(
        calls=int(calls), prompt_tokens=int(prompt), completion_tokens=int(completion), cost_usd=float(cost),
        cache_hits=int(hits), cache_misses=int(misses),
    )


class UsageStore:
    def __init__(
        self, sessions: sessionmaker, *, flush_s: float = 1.0, max_rows: int = 2000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sessions, self.flush_s, self.max_rows, self._clock = sessions, flush_s, max_rows, clock
        self._rows: list[dict[str, Any]] = []
        self._oldest: float | None = None  # when the oldest buffered row came in
        self._lock = threading.Lock()  # the buffer: requests add on the event loop, flushes run in threads

    def record(
        self,
        tenant: str,
        source: UsageSource,
        outcomes: Sequence[EntityOutcome],
        *,
        job_id: str | None = None,
        at: float | None = None,
    ) -> None:
        """Buffer the asked entities' rows (no I/O); :meth:`due` says when :meth:`flush` should write them."""
        when = at if at is not None else time.time()
        rows = [
            {"tenant": tenant, "at": when, "source": source, "entity": o.name, "status": o.status,
             "prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens, "cost_usd": o.cost_usd,
             "cache": o.cache, "job_id": job_id}
            for o in _asked(outcomes)
        ]
        if not rows:
            return
        with self._lock:
            if self._oldest is None:
                self._oldest = self._clock()
            self._rows.extend(rows)

    def due(self) -> bool:
        with self._lock:
            return bool(self._rows) and (
                len(self._rows) >= self.max_rows or self._clock() - (self._oldest or 0.0) >= self.flush_s
            )

    def flush(self) -> int:
        """Write every buffered row in one transaction; returns how many. On failure they stay buffered."""
        with self._lock:
            rows, self._rows, oldest, self._oldest = self._rows, [], self._oldest, None
        if not rows:
            return 0
        try:
            with self.sessions.begin() as session:
                session.execute(insert(UsageRow), rows)
        except BaseException:
            with self._lock:  # put them back in front, to be written by the next flush
                self._rows[:0] = rows
                self._oldest = oldest  # they are older than anything buffered since
            raise
        return len(rows)

    def report(self, tenant: str, since: datetime) -> UsageReport:
        """The tenant's usage recorded at or after ``since`` (an aware datetime), per entity and in total."""
        self.flush()
        query = (
            select(UsageRow.entity, *_SUMS)
            .where(UsageRow.tenant == tenant, UsageRow.at >= since.timestamp())
            .group_by(UsageRow.entity)
            .order_by(UsageRow.entity)
        )
        with self.sessions() as session:
            entities = {row[0]: _usage(row[1:]) for row in session.execute(query)}
        total = sum(entities.values(), Usage())
        return UsageReport(tenant=tenant, since=since.astimezone(UTC).isoformat(), total=total, entities=entities)

    def job_total(self, tenant: str, job_id: str) -> Usage:
        self.flush()
        with self.sessions() as session:
            row = session.execute(select(*_SUMS).where(UsageRow.tenant == tenant, UsageRow.job_id == job_id)).one()
        return _usage(row)
