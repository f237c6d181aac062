"""The ledger's errors::

    LedgerError
    ├── BudgetExceeded      the query would exceed the student's cap for the period (the API answers 429)
    ├── UnknownCharge       no charge with that id
    ├── ChargeStateError    refund after release, answer for a refunded charge, corrupt state
    └── AnswerPending       an identical request's answer is still being computed (try again shortly)
"""

from __future__ import annotations

from privacy.periods import iso_utc

__all__ = ["AnswerPending", "BudgetExceeded", "ChargeStateError", "LedgerError", "UnknownCharge"]


class LedgerError(Exception):
    """Base class of the ledger's errors."""


class BudgetExceeded(LedgerError):
    """The query would take the student past the cap of the current period; nothing was spent.

    The message goes back to API callers and into logs: it names no student (the caller knows
    which), and says when the allowance renews.
    """

    def __init__(
        self,
        tenant: str,
        student_id: str,
        spent: float,
        cap: float,
        requested: float,
        *,
        spent_delta: float = 0.0,
        cap_delta: float = 0.0,
        requested_delta: float = 0.0,
        period: str = "lifetime",
        renews_at: float | None = None,
    ) -> None:
        self.tenant, self.student_id = tenant, student_id
        self.spent, self.cap, self.requested = spent, cap, requested
        self.spent_delta, self.cap_delta, self.requested_delta = spent_delta, cap_delta, requested_delta
        self.period, self.renews_at = period, renews_at
        used = f"ε={spent:.6g} of {cap:.6g}"
        if requested_delta > 0:
            used += f", δ={spent_delta:.3g} of {cap_delta:.3g}"
        asked = f"ε={requested:.6g}" + (f", δ={requested_delta:.3g}" if requested_delta > 0 else "")
        renews = (
            f"the allowance renews at {iso_utc(renews_at)}" if renews_at is not None
            else "the cap is for the student's lifetime and does not renew" if period == "lifetime"
            else "the allowance does not renew within the period's known dates"
        )
        super().__init__(
            f"this student's privacy budget is spent ({period}): {used} used; a query with {asked} would exceed "
            f"the cap; {renews}"
        )


class UnknownCharge(LedgerError, LookupError):
    """No charge has this id."""


class ChargeStateError(LedgerError):
    """The charge is in the wrong state for the operation, or the stored state is corrupt."""


class AnswerPending(LedgerError):
    """An identical request of the student is still being answered: its answer will be served, but not yet."""
