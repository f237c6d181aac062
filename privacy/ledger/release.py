"""Charge → settle-or-refund, written once: ``async with ledger.releasing(...) as release:``.

Every release a student's budget pays for follows the same sequence (README "Privacy model"):

1. **charge** before anything is released — entering the block; :class:`~privacy.ledger.errors.BudgetExceeded`
   when the budget is spent (nothing charged, nothing released);
2. the body computes what it releases and calls :meth:`Release.settle` with it — the answer is stored and the
   spend is final (at fewer releases than charged when some answers were never released);
3. leaving the block **without settling**, or with an exception (a cancelled request included), **refunds**:
   nothing was released, so nothing is spent. The refund is shielded from cancellation; a refund that fails is
   logged with the charge id (never a student id) and the original error goes on.

A single student's release with a request fingerprint may be a *repeat* of an identical request inside the repeat
window: then nothing is charged, :attr:`Release.answer` holds the stored answer of the earlier request (waited for
while it is still being computed), and there is nothing to settle or refund. A group release (a cohort report, a
calibration) charges every student once, all or nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from privacy.ledger.charge import Charge
from privacy.ledger.errors import AnswerPending, ChargeStateError
from privacy.ledger.keys import StudentKey
from privacy.mechanisms import ReleaseCost
from privacy.periods import BudgetRule

if TYPE_CHECKING:
    from privacy.ledger.aio import AsyncLedger

__all__ = ["Release"]

log = logging.getLogger("fedcd.privacy")

_PASSES = 2  # a second charge only when the identical request waited for was refunded


class Release:
    """One charged release in progress (open it with :meth:`privacy.ledger.aio.AsyncLedger.releasing`).

    ``charges``: what this release charged (empty for a repeat); ``charge``: a single student's charge — the repeat
    charge when :attr:`answer` is set, with the student's totals either way.
    """

    def __init__(
        self,
        ledger: AsyncLedger,
        *,
        tenant: str,
        cost: ReleaseCost,
        student: StudentKey | None = None,
        students: Sequence[StudentKey] | None = None,
        releases: int = 1,
        rule: BudgetRule | None = None,
        fingerprint: str | None = None,
        source: str | None = None,
    ) -> None:
        if (student is None) == (students is None):
            raise ValueError("a release is for one student or for a group of students: give exactly one")
        if students is not None and (cost.delta or cost.sigma_over_sensitivity is not None or fingerprint is not None):
            raise ValueError("a group release costs a pure ε and has no request fingerprint")
        self._ledger, self.tenant, self.cost, self.rule, self.source = ledger, tenant, cost, rule, source
        self.student, self.students, self.releases, self.fingerprint = student, students, releases, fingerprint
        self.charges: list[Charge] = []
        self.charge: Charge | None = None
        self.answer: str | None = None
        self.settled = False

    @property
    def repeat(self) -> bool:
        """An identical earlier request's answer (:attr:`answer`): nothing charged, nothing to settle."""
        return self.answer is not None

    async def __aenter__(self) -> Release:
        if self.students is not None:
            self.charges = await self._ledger.charge_all(
                tenant=self.tenant, students=list(self.students), cost=self.cost, rule=self.rule, source=self.source,
            )
            return self
        for _ in range(_PASSES):
            assert self.student is not None  # one student, or a group (handled above)
            charge = await self._ledger.charge(
                tenant=self.tenant, student=self.student, cost=self.cost, request_fingerprint=self.fingerprint,
                releases=self.releases, rule=self.rule, source=self.source,
            )
            self.charge = charge
            if not charge.repeat:
                self.charges = [charge]
                return self
            try:
                stored = charge.answer_json if not charge.pending else await self._ledger.await_answer(charge.id)
            except TimeoutError as exc:
                raise AnswerPending("an identical request for this student is still being answered") from exc
            if stored is not None:
                self.answer = stored
                return self
        # The identical request waited for was refunded, and another one is now in flight in its place.
        raise AnswerPending("an identical request for this student is still being answered")

    async def settle(self, answer_json: str, *, released: int | None = None) -> Charge | None:
        """Store what was released; the spend is final. ``released``: the answers a single student's release
        actually released (default: every one charged; fewer are given back). Returns that student's settled
        charge (its totals after the settlement); ``None`` for a group. Settles once."""
        if self.settled:
            raise ChargeStateError("this release is settled already")
        if not self.charges:
            raise ChargeStateError("nothing was charged (a repeat): there is nothing to settle")
        if self.students is not None:
            await self._ledger.settle_all(self.charges, released=answer_json)
            self.settled = True
            return None
        charge = self.charges[0]
        if released is not None and not 1 <= released <= charge.releases:
            raise ValueError(f"released must be in [1, {charge.releases}], got {released}: leave without settling "
                             "when nothing was released")
        if released is None or released == charge.releases:  # everything charged for was released: one statement
            settled = await self._ledger.release(charge, answer_json)
        else:
            settled = await self._ledger.store_answer(charge.id, answer_json, releases=released, rule=self.rule)
        self.settled = True
        return settled

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.settled or not self.charges:
            return
        # Nothing was released (or the answer never left): give the students' budgets back, even when cancelled.
        await asyncio.shield(self._refund(self.charges))

    async def _refund(self, charges: Sequence[Charge]) -> None:
        try:
            if self.students is not None:
                await self._ledger.settle_all(charges, released=None)
            else:
                await self._ledger.refund(charges[0].id)
        except Exception:  # the original error matters more; the failure is logged without any student id
            log.exception("refund of charge(s) %s failed", ", ".join(c.id for c in charges))
