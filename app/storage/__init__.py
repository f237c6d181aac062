"""Persistent, tenant-scoped stores over the gateway's database (``app.db``)."""

from app.storage.calibrations import CalibrationStore, StoredCalibration
from app.storage.policies import PolicyStore, budget_rule, default_policy
from app.storage.qmatrices import QMatrixExists, QMatrixStore, StoredQMatrix
from app.storage.usage import UsageSource, UsageStore, entity_usage, usage_total

__all__ = [
    "CalibrationStore",
    "PolicyStore",
    "QMatrixExists",
    "QMatrixStore",
    "StoredCalibration",
    "StoredQMatrix",
    "UsageSource",
    "UsageStore",
    "budget_rule",
    "default_policy",
    "entity_usage",
    "usage_total",
]
