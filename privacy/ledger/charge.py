"""One charged query as the ledger returns it (:class:`Charge`), with the student's totals after it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privacy.accountants import Accountant
from privacy.ledger.tables import CHARGED
from privacy.periods import BudgetRule

__all__ = ["Charge", "charge_from_row"]


@dataclass(frozen=True, kw_only=True)
class Charge:
    """One charged query, with the student's totals after it.

    ``repeat``: an earlier identical charge, reused (nothing spent now). ``spent_*`` and
    ``remaining_epsilon`` are for the current period; ``lifetime_*`` for all time.
    """

    id: str
    tenant: str
    student_id: str
    epsilon: float
    delta: float
    mechanism: str
    releases: int
    fingerprint: str | None
    created_at: float
    status: str  # charged | released | refunded
    answer_json: str | None
    repeat: bool
    spent_epsilon: float
    spent_delta: float
    remaining_epsilon: float
    cap_epsilon: float
    period: str
    renews_at: float | None
    lifetime_epsilon: float
    lifetime_delta: float

    @property
    def pending(self) -> bool:
        """A repeat whose first request has not stored its answer yet."""
        return self.repeat and self.answer_json is None and self.status == CHARGED


def charge_from_row(
    row: Mapping[str, Any], rule: BudgetRule, window: Accountant, lifetime: Accountant, renews_at: float | None,
    *, repeat: bool,
) -> Charge:
    """The charge of a ``privacy_charges`` row, with the period's (``window``) and lifetime totals under ``rule``."""
    spent_epsilon, spent_delta = window.spent(rule.cap_delta)
    lifetime_epsilon, lifetime_delta = lifetime.spent(rule.cap_delta)
    return Charge(
        id=row["id"], tenant=row["tenant"], student_id=row["student_id"], epsilon=row["epsilon"],
        delta=row["delta"], mechanism=row["mechanism"], releases=row["releases"],
        fingerprint=row["fingerprint"], created_at=row["created_at"], status=row["status"],
        answer_json=row["answer_json"], repeat=repeat, spent_epsilon=spent_epsilon, spent_delta=spent_delta,
        remaining_epsilon=max(0.0, rule.cap_epsilon - spent_epsilon), cap_epsilon=rule.cap_epsilon,
        period=rule.period.label, renews_at=renews_at, lifetime_epsilon=lifetime_epsilon,
        lifetime_delta=lifetime_delta,
    )
