"""Persistent, tenant-scoped stores over the gateway's database (``app.db``)."""

from app.storage.calibrations import CalibrationStore, StoredCalibration
from app.storage.policies import PolicyStore, budget_rule, default_policy
from app.storage.qmatrices import QMatrixExists, QMatrixStore, StoredQMatrix

__all__ = [
    "CalibrationStore",
    "PolicyStore",
    "QMatrixExists",
    "QMatrixStore",
    "StoredCalibration",
    "StoredQMatrix",
    "budget_rule",
    "default_policy",
]
