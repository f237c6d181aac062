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
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
        _zone(self.timezone)  # an unknown zone fails here, as a ValueError

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
        """Terms from ISO dates (``2026-09-01``); a term runs from its first day's 00:00 to the day after its last.

        Every problem is a ``ValueError`` naming the term (``terms[1].end``), never an ``OverflowError``: a term
        ending on the calendar's last day (9999-12-31) has no next day, so it runs to the last instant a
        timestamp can show; a start that cannot be shown in UTC (0001-01-01 east of Greenwich) is refused, since
        a start is what "renews at" reports.
        """
        zone = _zone(timezone)
        spans = []
        for k, (first, last) in enumerate(terms):
            start = _midnight(_day(first, f"terms[{k}].start"), zone)
            if not _FIRST_TS <= start <= _LAST_TS:
                raise ValueError(f"terms[{k}].start: {first} 00:00 in {timezone} is outside the years 1-9999 in UTC")
            last_day = _day(last, f"terms[{k}].end")
            try:
                end = min(_midnight(last_day + timedelta(days=1), zone), _LAST_TS)
            except OverflowError:  # 9999-12-31: the calendar has no next day
                end = _LAST_TS
            if end <= start:
                raise ValueError(f"terms[{k}]: the end ({last}) is before the start ({first})")
            spans.append((start, end))
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


# The instants a datetime can show in UTC (iso_utc, messages), to the second: datetime.max's microseconds would
# round up to year 10000 as a float.
_FIRST_TS = datetime(1, 1, 1, tzinfo=UTC).timestamp()
_LAST_TS = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def _zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: e.g. an unreadable zone file
        raise ValueError(f"timezone: unknown time zone {timezone!r}") from exc


def _day(text: str, field: str) -> date:
    try:
        return date.fromisoformat(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field}: {text!r} is not a date YYYY-MM-DD ({exc})") from exc


def _midnight(day: date, zone: ZoneInfo) -> float:
    """The epoch time of ``day``'s 00:00 in ``zone`` (works for any date, even one whose UTC time is out of range)."""
    return datetime.combine(day, time(), tzinfo=zone).timestamp()


def iso_utc(ts: float | None) -> str | None:
    """An epoch time as an ISO 8601 UTC string (what messages and responses show); clamped to years 1-9999."""
    if ts is None or math.isnan(ts):  # NaN: no instant to show
        return None
    ts = min(max(ts, _FIRST_TS), _LAST_TS)
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
