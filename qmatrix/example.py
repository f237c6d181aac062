"""The project's own example Q-matrix (pre-algebra; items written for fedcd, not taken from any dataset)."""

from __future__ import annotations

from importlib.resources import files

from qmatrix.io import qmatrix_from_json
from qmatrix.model import QMatrix

__all__ = ["EXAMPLE_QMATRIX_ID", "example_qmatrix"]

EXAMPLE_QMATRIX_ID = "example-prealgebra"


def example_qmatrix() -> QMatrix:
    return qmatrix_from_json(files("qmatrix").joinpath("data/example_qmatrix.json").read_text(encoding="utf-8"))
