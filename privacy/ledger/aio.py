"""The ledger's async face: :class:`AsyncLedger` runs each call of a :class:`~privacy.ledger.core.PrivacyLedger`
in a worker thread, off the event loop, and opens :class:`~privacy.ledger.release.Release`\\ s.

The engine stays synchronous (its transactions hold database locks, which threads wait on well); everything an
``async`` caller needs goes through here, so the engine carries no async copies of its API.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from typing import Any

from privacy.ledger.charge import Charge
from privacy.ledger.core import PrivacyLedger
from privacy.ledger.keys import StudentKey
from privacy.ledger.release import Release
from privacy.ledger.tables import REFUNDED, RELEASED
from privacy.mechanisms import ReleaseCost
from privacy.periods import BudgetRule

__all__ = ["AsyncLedger"]


class AsyncLedger:
    """``PrivacyLedger``'s API for coroutines: the same calls, each awaited in a worker thread."""

    def __init__(self, engine: PrivacyLedger) -> None:
        self.engine = engine

    @property
    def rule(self) -> BudgetRule:
        """The engine's default budget rule (used when a call gives none)."""
        return self.engine.rule

    async def charge(
        self, *, tenant: str, student: StudentKey, cost: ReleaseCost, request_fingerprint: str | None = None,
        releases: int = 1, rule: BudgetRule | None = None, source: str | None = None,
    ) -> Charge:
        """:meth:`PrivacyLedger.charge` (the same parameters: tests/test_signatures.py checks them)."""
        return await asyncio.to_thread(functools.partial(
            self.engine.charge, tenant=tenant, student=student, cost=cost, request_fingerprint=request_fingerprint,
            releases=releases, rule=rule, source=source,
        ))

    async def charge_all(
        self, *, tenant: str, students: Sequence[StudentKey], cost: ReleaseCost, rule: BudgetRule | None = None,
        source: str | None = None,
    ) -> list[Charge]:
        """:meth:`PrivacyLedger.charge_all`."""
        return await asyncio.to_thread(functools.partial(
            self.engine.charge_all, tenant=tenant, students=students, cost=cost, rule=rule, source=source,
        ))

    async def settle_all(self, made: Sequence[Charge], *, released: str | None) -> None:
        """:meth:`PrivacyLedger.settle_all`."""
        await asyncio.to_thread(lambda: self.engine.settle_all(made, released=released))

    async def store_answer(
        self, charge_id: str, answer_json: str, *, releases: int | None = None, rule: BudgetRule | None = None
    ) -> Charge:
        """:meth:`PrivacyLedger.store_answer`."""
        return await asyncio.to_thread(
            functools.partial(self.engine.store_answer, charge_id, answer_json, releases=releases, rule=rule)
        )

    async def release(self, charge: Charge, answer_json: str) -> Charge:
        """:meth:`PrivacyLedger.release`."""
        return await asyncio.to_thread(self.engine.release, charge, answer_json)

    async def refund(self, charge_id: str) -> None:
        """:meth:`PrivacyLedger.refund`."""
        await asyncio.to_thread(self.engine.refund, charge_id)

    async def lookup_repeat(self, *, tenant: str, student: StudentKey, request_fingerprint: str) -> str | None:
        """:meth:`PrivacyLedger.lookup_repeat`."""
        return await asyncio.to_thread(functools.partial(
            self.engine.lookup_repeat, tenant=tenant, student=student, request_fingerprint=request_fingerprint,
        ))

    async def get_charge(self, charge_id: str, *, rule: BudgetRule | None = None) -> Charge:
        """:meth:`PrivacyLedger.get_charge`."""
        return await asyncio.to_thread(lambda: self.engine.get_charge(charge_id, rule=rule))

    async def status(self, tenant: str, student: StudentKey, *, rule: BudgetRule | None = None) -> dict[str, Any]:
        """:meth:`PrivacyLedger.status`."""
        return await asyncio.to_thread(functools.partial(self.engine.status, tenant, student, rule=rule))

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
