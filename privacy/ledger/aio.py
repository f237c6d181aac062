"""The ledger's async face: :class:`AsyncLedger` runs each call of a :class:`~privacy.ledger.core.PrivacyLedger`
off the event loop, and opens :class:`~privacy.ledger.release.Release`\\ s.

The engine stays synchronous (its transactions hold database locks, which threads wait on well); everything an
``async`` caller needs goes through here, so the engine carries no async copies of its API. Reads run in a worker
thread. Writes on SQLite are queued to the ledger's writer thread, which commits them in batches, one fsync per
batch (group commit, :mod:`privacy.ledger.writer`); on PostgreSQL they run in a worker thread, a transaction each,
as a group's writes (``charge_all``, ``settle_all``: one per student) do everywhere.
Either way a write call returns only once it is committed.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from privacy.ledger.core import PrivacyLedger
from privacy.ledger.keys import StudentKey
from privacy.ledger.release import Release
from privacy.ledger.tables import REFUNDED, RELEASED
from privacy.mechanisms import ReleaseCost
from privacy.periods import BudgetRule

__all__ = ["AsyncLedger"]

P = ParamSpec("P")
R = TypeVar("R")


Method = Callable[Concatenate[PrivacyLedger, P], R]
Face = Callable[Concatenate["AsyncLedger", P], Coroutine[Any, Any, R]]


def _face(method: Method[P, R], face: Face[P, R]) -> Face[P, R]:
    """``face`` dressed as the engine's ``method``: ``functools.wraps`` gives it the engine's name, docstring and
    signature (``inspect.signature`` follows ``__wrapped__``), and its parameters are the engine's, typed (``P``):
    the face cannot drift from the engine."""
    face = functools.wraps(method)(face)
    face.__module__, face.__qualname__ = __name__, f"AsyncLedger.{method.__name__}"
    return face


def _in_thread(method: Method[P, R]) -> Face[P, R]:
    """The engine's ``method`` as a coroutine method of :class:`AsyncLedger`, run in a worker thread: the reads, and
    a group's writes (one per student of a cohort or calibration, each its own transaction under the same locks),
    which on the writer thread would hold every diagnosis's charge queued behind thousands of them."""

    async def threaded(ledger: AsyncLedger, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, ledger.engine, *args, **kwargs)

    return _face(method, threaded)


def _written(method: Method[P, R]) -> Face[P, R]:
    """The engine's write ``method`` as a coroutine method: on SQLite queued to the ledger's writer thread and
    resolved after its batch's commit (group commit); on PostgreSQL in a worker thread, in its own transaction."""

    async def written(ledger: AsyncLedger, /, *args: P.args, **kwargs: P.kwargs) -> R:
        committer = ledger.engine.engines.committer
        if committer is None:
            return await asyncio.to_thread(method, ledger.engine, *args, **kwargs)
        result: R = await committer.submit(method, ledger.engine, *args, **kwargs)
        return result

    return _face(method, written)


class AsyncLedger:
    """``PrivacyLedger``'s API for coroutines: the same calls, each awaited off the event loop (writes on SQLite
    group-committed by the ledger's writer thread, which ``PrivacyLedger.close`` stops)."""

    def __init__(self, engine: PrivacyLedger) -> None:
        self.engine = engine

    @property
    def rule(self) -> BudgetRule:
        """The engine's default budget rule (used when a call gives none)."""
        return self.engine.rule

    # The engine's calls, generated (tests/test_signatures.py checks the face against the engine).
    charge = _written(PrivacyLedger.charge)
    charge_all = _in_thread(PrivacyLedger.charge_all)  # a group's writes: apart from the writer thread
    settle_all = _in_thread(PrivacyLedger.settle_all)
    store_answer = _written(PrivacyLedger.store_answer)
    release = _written(PrivacyLedger.release)
    refund = _written(PrivacyLedger.refund)
    lookup_repeat = _in_thread(PrivacyLedger.lookup_repeat)
    get_charge = _in_thread(PrivacyLedger.get_charge)
    status = _in_thread(PrivacyLedger.status)

    async def await_answer(self, charge_id: str, *, timeout_s: float = 30.0, poll_s: float = 0.05) -> str | None:
        """Wait for a pending charge's answer; ``None`` if it was refunded (then charge anew).

        Raises ``TimeoutError`` if it is still pending after ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            charge = await asyncio.to_thread(self.engine.get_charge, charge_id)
            if charge.status == RELEASED:
                return charge.answer_json
            if charge.status == REFUNDED:
                return None
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the answer of charge {charge_id} is still pending after {timeout_s}s")
            await asyncio.sleep(poll_s)

    def releasing(
        self,
        *,
        tenant: str,
        cost: ReleaseCost,
        student: StudentKey | None = None,
        students: Sequence[StudentKey] | None = None,
        releases: int = 1,
        rule: BudgetRule | None = None,
        fingerprint: str | None = None,
        source: str | None = None,
    ) -> Release:
        """One charged release, as ``async with ledger.releasing(...) as release:`` (see :class:`Release`):
        ``student`` (``releases`` answers, a repeat of ``fingerprint`` answered from the ledger) or a group of
        ``students`` (each charged once, all or nothing)."""
        return Release(
            self, tenant=tenant, cost=cost, student=student, students=students, releases=releases, rule=rule,
            fingerprint=fingerprint, source=source,
        )
