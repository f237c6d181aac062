"""The per-student privacy ledger (see :mod:`privacy.ledger.core`): the synchronous engine
(:class:`PrivacyLedger`), its async face (:class:`AsyncLedger`) and the charge → settle-or-refund sequence
(:class:`Release`)."""

from privacy.ledger.aio import AsyncLedger
from privacy.ledger.charge import Charge
from privacy.ledger.core import PrivacyLedger
from privacy.ledger.errors import AnswerPending, BudgetExceeded, ChargeStateError, LedgerError, UnknownCharge
from privacy.ledger.keys import StudentKey
from privacy.ledger.release import Release
from privacy.ledger.tables import LEDGER_METADATA

__all__ = [
    "LEDGER_METADATA",
    "AnswerPending",
    "AsyncLedger",
    "BudgetExceeded",
    "Charge",
    "ChargeStateError",
    "LedgerError",
    "PrivacyLedger",
    "Release",
    "StudentKey",
    "UnknownCharge",
]
