"""Budget periods: over which stretch of time a student's spend counts toward the cap.

A period turns "now" into a :class:`Window` — the time from which charges count, and when the
allowance renews (known in advance for calendar periods; for a rolling window it depends on when
the counted charges were made, so the ledger works it out). The ledger always keeps every
charge, so the lifetime total is exact whatever the period.

* :class:`Lifetime` — every charge counts, forever (the allowance never renews).
* :class:`Rolling` — charges of the last ``window_s`` seconds count.
* :class:`CalendarDay` / :class:`CalendarWeek` — charges since local midnight / Monday 00:00
  in ``timezone``; the allowance renews at the next one.
* :class:`Terms` — charges since the start of the current (or most recent) term; renews when
  the next term starts. Time between terms counts toward the term before it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = [
    "BudgetPeriod",
    "BudgetRule",
    "CalendarDay",
    "CalendarWeek",
    "Lifetime",
    "Rolling",
    "Terms",
    "Window",
    "iso_utc",
]


@dataclass(frozen=True)
class Window:
    """Charges made at or after ``start`` count (``None``: all); ``renews_at`` is when it resets (``None``: never
    on a fixed date — for a rolling window the ledger derives it from the counted charges)."""

    start: float | None
    renews_at: float | None


class BudgetPeriod(ABC):
    @property
    @abstractmethod
    def label(self) -> str:
        """How responses and messages name the period, e.g. ``rolling 86400 s``."""

    @abstractmethod
    def window(self, now: float) -> Window: ...


@dataclass(frozen=True)
class Lifetime(BudgetPeriod):
    @property
    def label(self) -> str:
        return "lifetime"

    def window(self, now: float) -> Window:
        return Window(None, None)


@dataclass(frozen=True)
class Rolling(BudgetPeriod):
    window_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s must be a positive number of seconds, got {self.window_s}")

    @property
    def label(self) -> str:
        return f"rolling {self.window_s:g} s"

    def window(self, now: float) -> Window:
        return Window(now - self.window_s, None)


@dataclass(frozen=True)
class _Calendar(BudgetPeriod, ABC):
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        ZoneInfo(self.timezone)  # an unknown zone fails here

    @abstractmethod
    def _start_of(self, local: datetime) -> datetime: ...

    @abstractmethod
    def _length(self) -> timedelta: ...

    def window(self, now: float) -> Window:
        zone = ZoneInfo(self.timezone)
        start = self._start_of(datetime.fromtimestamp(now, zone))
        # Add in local wall time, then re-resolve: a day is 23 or 25 hours across a DST change.
        renews = (start.replace(tzinfo=None) + self._length()).replace(tzinfo=zone)
        return Window(start.timestamp(), renews.timestamp())


@dataclass(frozen=True)
class CalendarDay(_Calendar):
    @property
    def label(self) -> str:
        return f"day ({self.timezone})"

    def _start_of(self, local: datetime) -> datetime:
        return local.replace(hour=0, minute=0, second=0, microsecond=0)

    def _length(self) -> timedelta:
        return timedelta(days=1)


@dataclass(frozen=True)
class CalendarWeek(_Calendar):
    """Weeks start on Monday 00:00 local time (ISO 8601)."""

    @property
    def label(self) -> str:
        return f"week ({self.timezone})"

    def _start_of(self, local: datetime) -> datetime:
        day = local.replace(hour=0, minute=0, second=0, microsecond=0)
        return day - timedelta(days=day.weekday())

    def _length(self) -> timedelta:
        return timedelta(weeks=1)


@dataclass(frozen=True)
class Terms(BudgetPeriod):
    """School terms, as ``(start, end)`` epoch seconds, sorted and not overlapping."""

    terms: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.terms:
            raise ValueError("give at least one term")
        previous_end = -math.inf
        for start, end in self.terms:
            if not (math.isfinite(start) and math.isfinite(end) and start < end):
                raise ValueError(f"a term must start before it ends, got ({start}, {end})")
            if start < previous_end:
                raise ValueError("terms must be sorted and must not overlap")
            previous_end = end

    @classmethod
    def from_dates(cls, terms: Sequence[tuple[str, str]], *, timezone: str = "UTC") -> Terms:
        """Terms from ISO dates (``2026-09-01``); a term runs from its first day's 00:00 to the day after its last."""
        zone = ZoneInfo(timezone)
        spans = []
        for first, last in terms:
            start = datetime.fromisoformat(first).replace(tzinfo=zone)
            end = datetime.fromisoformat(last).replace(tzinfo=zone) + timedelta(days=1)
            spans.append((start.timestamp(), end.timestamp()))
        return cls(tuple(spans))

    @property
    def label(self) -> str:
        return f"term ({len(self.terms)} terms)"

    def window(self, now: float) -> Window:
        started = [start for start, _ in self.terms if start <= now]
        upcoming = [start for start, _ in self.terms if start > now]
        # Before the first term, the stretch up to it is its own window.
        return Window(max(started) if started else None, min(upcoming) if upcoming else None)


@dataclass(frozen=True)
class BudgetRule:
    """A cap per period: what one (tenant, student) may spend in a window."""

    cap_epsilon: float
    cap_delta: float = 0.0
    period: BudgetPeriod = Lifetime()

    def __post_init__(self) -> None:
        if not self.cap_epsilon > 0:  # math.inf means no cap
            raise ValueError(f"cap_epsilon must be > 0, got {self.cap_epsilon}")
        if not 0.0 <= self.cap_delta < 1.0:
            raise ValueError(f"cap_delta must lie in [0, 1), got {self.cap_delta}")


def iso_utc(ts: float | None) -> str | None:
    """An epoch time as an ISO 8601 UTC string (what messages and responses show)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z") if ts is not None else None
