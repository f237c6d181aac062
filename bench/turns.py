"""What a bench measured in turns says, and what is inside its noise.

Two servers that take turns on a scenario (``bench.gateway``) each have one reading per turn; the turn-by-turn ratio
of the two readings is taken within minutes, on the same machine state, so the shared machine's drift cancels in it.
A comparison is reported as the median of those per-turn ratios with their range (lowest to highest turn), and a
difference is *inside the noise* when that range reaches the value it is compared with (1.0 for "as fast", a
target's bound for a target): another run's median could then fall on the other side of it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Spread", "median_of_turns", "per_turn_ratio", "spread", "verdict"]


@dataclass(frozen=True)
class Spread:
    """The median of some per-turn readings and their range."""

    median: float
    low: float
    high: float
    turns: int

    def reaches(self, value: float) -> bool:
        """Whether ``value`` lies within the turns' range (a difference from it is inside the noise)."""
        return self.low <= value <= self.high

    def text(self, fmt: str = ".2f") -> str:
        if self.turns < 2:
            return format(self.median, fmt)
        return f"{self.median:{fmt}} ({self.low:{fmt}}–{self.high:{fmt}})"


def spread(values: Sequence[float]) -> Spread | None:
    """Median and range of ``values``; None when there are none."""
    if not values:
        return None
    return Spread(statistics.median(values), min(values), max(values), len(values))


def _turn_values(row: dict[str, Any], key: str) -> list[float]:
    """A row's per-turn readings of ``key``; its one overall reading when it was not measured in turns."""
    turns = row.get("turns") or []
    return [float(t[key]) for t in turns] if turns else [float(row[key])]


def per_turn_ratio(numerator: dict[str, Any], denominator: dict[str, Any], key: str) -> Spread | None:
    """``numerator``'s reading over ``denominator``'s, turn by turn (both rows measured in the same turns); the
    overall ratio when either was not measured in turns (or in a different number of them)."""
    top, bottom = _turn_values(numerator, key), _turn_values(denominator, key)
    if len(top) != len(bottom):
        top, bottom = [float(numerator[key])], [float(denominator[key])]
    return spread([t / b for t, b in zip(top, bottom, strict=True) if b > 0])


def median_of_turns(row: dict[str, Any], key: str) -> Spread | None:
    """One row's own readings of ``key`` over its turns."""
    return spread(_turn_values(row, key))


def verdict(value: Spread, bound: float, *, lower_is_better: bool = True) -> str:
    """``met`` / ``missed by x`` for the median, and whether the turns' range reaches the bound (then the verdict
    is inside the noise: another run may read the other way)."""
    met = value.median <= bound if lower_is_better else value.median >= bound
    text = "met" if met else f"missed by {abs(value.median - bound):.3g}"
    if value.turns > 1:
        text += "; inside the noise (the turns' range reaches the bound)" if value.reaches(bound) else \
            ("; in every turn" if met else "; in every turn (outside the noise)")
    return text
