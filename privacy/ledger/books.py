"""A student's books: the accountants the ledger composes from its rows, inside the ledger's transactions.

The *lifetime* accountant of a student is saved with the student's row (``privacy_students``) and checked against
the charges; the *window* accountant of a period is composed afresh from the charges that count now. Every function
here runs on a connection the ledger (:mod:`privacy.ledger.core`) opened, under the student's lock when it writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from privacy.accountants import Accountant, make_accountant
from privacy.ledger.charge import Charge, charge_from_row
from privacy.ledger.engines import LedgerEngines
from privacy.ledger.errors import ChargeStateError
from privacy.ledger.statements import WINDOW, charge_path
from privacy.ledger.tables import REFUNDED, charges
from privacy.mechanisms import ReleaseCost
from privacy.periods import BudgetRule, Rolling

__all__ = ["Books", "Spend", "fits"]

_REL_TOL = 1e-9  # float slack on the cap: 5 × 0.1 must fit a cap of 0.5


def fits(rule: BudgetRule, epsilon: float, delta: float) -> bool:
    """Whether a spend of (``epsilon``, ``delta``) is within the rule's cap (with a relative float slack)."""
    return epsilon <= rule.cap_epsilon * (1 + _REL_TOL) and delta <= rule.cap_delta * (1 + _REL_TOL)


@dataclass(frozen=True)
class Spend:
    """What counts now: the window's accountant (lifetime's for a lifetime cap) and the counted charges."""

    accountant: Accountant
    counted: list[Mapping[str, Any]]  # oldest first; empty for a lifetime cap (not needed there)
    renews_at: float | None


class Books:
    """The accountant arithmetic of one ledger (``accountant``: the composition it uses) over its engines' rows."""

    def __init__(self, accountant: str, engines: LedgerEngines) -> None:
        make_accountant(accountant)  # an unknown name fails here
        self.accountant, self._db = accountant, engines
        self.empty_state = json.dumps(make_accountant(accountant).state_dict())

    def new(self) -> Accountant:
        return make_accountant(self.accountant)

    def step(self, accountant: Accountant, row: Mapping[str, Any]) -> None:
        cost = ReleaseCost(  # a stored charge, read back as the cost it was charged at
            epsilon=row["epsilon"], delta=row["delta"], mechanism=row["mechanism"],
            sigma_over_sensitivity=row["sigma_over_sensitivity"],
        )
        for _ in range(row["releases"]):
            accountant.step(cost)

    def spend(
        self, conn: Connection, tenant: str, student_id: str, rule: BudgetRule, now: float, lifetime: Accountant
    ) -> Spend:
        """The charges that count against the cap now, composed (a fresh accountant over the window)."""
        window = rule.period.window(now)
        if window.start is None:
            return Spend(self._clone(lifetime), [], window.renews_at)
        counted = list(conn.execute(
            WINDOW, {"tenant": tenant, "student_id": student_id, "since": window.start}
        ).mappings())
        accountant = self.new()
        for row in counted:
            self.step(accountant, row)
        renews_at = window.renews_at
        if isinstance(rule.period, Rolling) and counted:
            renews_at = counted[0]["created_at"] + rule.period.window_s  # the oldest counted charge drops out
        return Spend(accountant, counted, renews_at)

    def _clone(self, accountant: Accountant) -> Accountant:
        clone = self.new()
        clone.load_state_dict(accountant.state_dict())
        return clone

    def renewal(self, spend: Spend, rule: BudgetRule, cost: ReleaseCost, releases: int) -> float | None:
        """When the refused request would fit: the next period for a calendar cap; for a rolling window, once
        enough of the oldest counted charges have dropped out (``None``: never, e.g. it exceeds the cap alone)."""
        if not isinstance(rule.period, Rolling):
            return spend.renews_at
        for k in range(len(spend.counted) + 1):
            remaining = self.new()
            for row in spend.counted[k:]:
                self.step(remaining, row)
            for _ in range(releases):
                remaining.step(cost)
            if fits(rule, *remaining.spent(rule.cap_delta)):
                return spend.counted[k - 1]["created_at"] + rule.period.window_s if k else None
        return None

    def load(self, conn: Connection, tenant: str, student_id: str, *, verify: bool = True) -> tuple[Accountant, int]:
        """The student's lifetime accountant from its saved state, checked against the charges table
        (``verify``; the charge path skips that aggregate: the state is written in the same transactions)."""
        row = charge_path.student.first(conn, {"tenant": tenant, "student_id": student_id})
        if row is None:
            return self.new(), 0
        try:
            state = json.loads(row["accountant_json"])
        except ValueError as exc:
            raise ChargeStateError("a student's ledger state is not JSON") from exc
        if not isinstance(state, dict) or state.get("accountant") != self.accountant:
            return self.rebuild(conn, tenant, student_id)  # saved by another accountant: replay the charges
        accountant = self.new()
        try:
            accountant.load_state_dict(state)
        except ValueError as exc:
            raise ChargeStateError(f"a student's ledger state is corrupt: {exc}") from exc
        if not verify:
            return accountant, row["queries"]
        releases, queries = conn.execute(
            select(func.coalesce(func.sum(charges.c.releases), 0), func.count())
            .where(charges.c.tenant == tenant, charges.c.student_id == student_id, charges.c.status != REFUNDED)
        ).one()
        if (len(accountant), row["queries"]) != (releases, queries):
            raise ChargeStateError(
                "a student's ledger state disagrees with its charges: "
                f"{len(accountant)} releases in {row['queries']} queries saved, {releases} in {queries} charged"
            )
        return accountant, queries

    def rebuild(self, conn: Connection, tenant: str, student_id: str) -> tuple[Accountant, int]:
        """The student's lifetime accountant replayed from every charge not refunded, and their number."""
        accountant, queries = self.new(), 0
        rows = conn.execute(
            select(charges)
            .where(charges.c.tenant == tenant, charges.c.student_id == student_id, charges.c.status != REFUNDED)
            .order_by(charges.c.seq)
        ).mappings()
        for row in rows:
            queries += 1
            self.step(accountant, row)
        return accountant, queries

    def save(
        self, conn: Connection, tenant: str, student_id: str, accountant: Accountant, queries: int, now: float
    ) -> None:
        values = {"accountant_json": json.dumps(accountant.state_dict()), "queries": queries, "updated_at": now}
        self._db.upsert_student(conn, tenant, student_id, values)

    def recount(self, conn: Connection, tenant: str, student_id: str, now: float) -> None:
        """Save the student's lifetime totals replayed from the charges (after a refund or a partial settlement)."""
        self.save(conn, tenant, student_id, *self.rebuild(conn, tenant, student_id), now)

    def charge_of(
        self, conn: Connection, row: Mapping[str, Any], rule: BudgetRule, now: float, *, repeat: bool
    ) -> Charge:
        """The charge of ``row`` with the student's totals now."""
        lifetime = self.load(conn, row["tenant"], row["student_id"], verify=False)[0]
        spend = self.spend(conn, row["tenant"], row["student_id"], rule, now, lifetime)
        return charge_from_row(row, rule, spend.accountant, lifetime, spend.renews_at, repeat=repeat)
