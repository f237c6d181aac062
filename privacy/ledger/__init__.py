"""The per-student privacy ledger (see :mod:`privacy.ledger.core`)."""

from privacy.ledger.core import Charge, PrivacyLedger
from privacy.ledger.errors import BudgetExceeded, ChargeStateError, LedgerError, UnknownCharge
from privacy.ledger.tables import LEDGER_METADATA

__all__ = ["LEDGER_METADATA", "BudgetExceeded", "Charge", "ChargeStateError", "LedgerError", "PrivacyLedger", "UnknownCharge"]
