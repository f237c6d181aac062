"""Field types shared by the request bodies of several resources: names, ε and δ."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import FailFast, Field

from privacy import DELTA_MAX, DELTA_MIN, EPSILON_MAX, EPSILON_MIN

__all__ = ["Delta", "Epsilon", "EpsilonValue", "Name", "QMatrixNames"]

# A concept or entity name in a request: non-empty, bounded.
Name = Annotated[str, Field(min_length=1, max_length=256)]
# The lists of a Q-matrix stop at their first invalid element: a 16 MiB body of 4 million empty names otherwise made
# 4 million errors (2 GB inside pydantic, 6.7 GB and 33 s to list them) for a 422 that shows only the first 20 anyway.
# Problems of a schema-valid Q-matrix (duplicates, unknown concepts…) are still listed together (qmatrix.model).
QMatrixNames = Annotated[list[Name], FailFast()]

# ε of one release, within the range every mechanism and accountant is total over (privacy/ranges.py).
EpsilonValue = Annotated[float, Field(ge=EPSILON_MIN, le=EPSILON_MAX, allow_inf_nan=False)]
Epsilon = EpsilonValue | Literal["none"]
Delta = Annotated[float, Field(ge=DELTA_MIN, le=DELTA_MAX, allow_inf_nan=False)]
