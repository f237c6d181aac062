"""Persistent, tenant-scoped stores over the gateway's database (``app.db``)."""

from app.storage.calibrations import CalibrationStore, StoredCalibration
from app.storage.qmatrices import QMatrixExists, QMatrixStore, StoredQMatrix

__all__ = ["CalibrationStore", "QMatrixExists", "QMatrixStore", "StoredCalibration", "StoredQMatrix"]
