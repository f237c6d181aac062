"""Budget periods: rolling windows, calendar days and weeks, terms — with a controllable clock."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from privacy import (
    BudgetExceeded,
    BudgetRule,
    CalendarDay,
    CalendarWeek,
    Lifetime,
    PrivacyLedger,
    ReleaseCost,
    Rolling,
    StudentKey,
    Terms,
)

T, S = "tenant-a", "student-1"
DAY = 86400.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _ledger(db: Path | str, rule: BudgetRule, clock: Clock) -> PrivacyLedger:
    return PrivacyLedger(db, rule=rule, clock=clock, repeat_window_s=0)


def _charge(ledger: PrivacyLedger, epsilon: float = 1.0, student: str = S) -> None:
    cost = ReleaseCost(epsilon=epsilon, delta=0.0, mechanism="laplace")
    ledger.charge(tenant=T, student=StudentKey(student), cost=cost)


def test_a_rolling_window_forgets_old_spend_but_the_lifetime_total_keeps_it(db: Path | str) -> None:
    clock = Clock(1_000_000.0)
    ledger = _ledger(db, BudgetRule(cap_epsilon=3.0, period=Rolling(window_s=100.0)), clock)
    for offset in (0.0, 10.0, 20.0):
        clock.now = 1_000_000.0 + offset
        _charge(ledger)
    clock.now = 1_000_050.0
    with pytest.raises(BudgetExceeded) as refused:
        _charge(ledger)
    # the request fits once the charge made at t=0 drops out: 100 s later
    assert refused.value.renews_at == pytest.approx(1_000_100.0) and "renews at" in str(refused.value)
    status = ledger.status(T, S)
    assert status["spent_epsilon"] == 3.0 and status["remaining_epsilon"] == 0.0 and status["renews_at"] is not None
    clock.now = 1_000_100.5  # the first charge is out of the window
    _charge(ledger)
    status = ledger.status(T, S)
    assert status["spent_epsilon"] == 3.0 and status["lifetime_epsilon"] == 4.0 and status["queries"] == 4


def test_a_request_bigger_than_the_cap_never_renews(db: Path | str) -> None:
    ledger = _ledger(db, BudgetRule(cap_epsilon=3.0, period=Rolling(window_s=100.0)), Clock(0.0))
    with pytest.raises(BudgetExceeded) as refused:
        _charge(ledger, epsilon=5.0)
    assert refused.value.renews_at is None


def test_a_calendar_day_renews_at_local_midnight(db: Path | str) -> None:
    zone = ZoneInfo("Europe/Paris")
    evening = datetime(2026, 12, 1, 23, 30, tzinfo=zone).timestamp()
    clock = Clock(evening)
    ledger = _ledger(db, BudgetRule(cap_epsilon=2.0, period=CalendarDay(timezone="Europe/Paris")), clock)
    _charge(ledger)
    _charge(ledger)
    with pytest.raises(BudgetExceeded) as refused:
        _charge(ledger)
    assert refused.value.renews_at == datetime(2026, 12, 2, tzinfo=zone).timestamp()
    assert "2026-12-01T23:00:00Z" in str(refused.value)  # Paris midnight, in UTC
    clock.now = datetime(2026, 12, 2, 0, 0, 1, tzinfo=zone).timestamp()  # across the boundary
    _charge(ledger)
    assert ledger.status(T, S)["spent_epsilon"] == 1.0 and ledger.status(T, S)["lifetime_epsilon"] == 3.0


def test_a_day_across_a_daylight_saving_change_is_the_local_calendar_day() -> None:
    zone = ZoneInfo("America/New_York")
    noon = datetime(2026, 3, 8, 12, tzinfo=zone).timestamp()  # DST starts at 02:00 that day: a 23-hour day
    window = CalendarDay(timezone="America/New_York").window(noon)
    assert window.start == datetime(2026, 3, 8, tzinfo=zone).timestamp()
    assert window.renews_at == datetime(2026, 3, 9, tzinfo=zone).timestamp()
    assert window.renews_at - window.start == 23 * 3600


def test_a_calendar_week_starts_on_monday(db: Path | str) -> None:
    wednesday = datetime(2026, 12, 2, 15, tzinfo=ZoneInfo("UTC")).timestamp()
    window = CalendarWeek().window(wednesday)
    assert datetime.fromtimestamp(window.start, ZoneInfo("UTC")) == datetime(2026, 11, 30, tzinfo=ZoneInfo("UTC"))
    assert window.renews_at - window.start == 7 * DAY


def test_terms_count_from_the_current_terms_start(db: Path | str) -> None:
    terms = Terms.from_dates([("2026-09-01", "2026-12-18"), ("2027-01-05", "2027-03-26")])
    clock = Clock(datetime(2026, 12, 10, tzinfo=ZoneInfo("UTC")).timestamp())
    ledger = _ledger(db, BudgetRule(cap_epsilon=2.0, period=terms), clock)
    _charge(ledger)
    _charge(ledger)
    clock.now = datetime(2026, 12, 28, tzinfo=ZoneInfo("UTC")).timestamp()  # the winter break counts toward term 1
    with pytest.raises(BudgetExceeded) as refused:
        _charge(ledger)
    assert refused.value.renews_at == datetime(2027, 1, 5, tzinfo=ZoneInfo("UTC")).timestamp()
    clock.now = datetime(2027, 1, 6, tzinfo=ZoneInfo("UTC")).timestamp()
    _charge(ledger)
    assert ledger.status(T, S)["spent_epsilon"] == 1.0
    with pytest.raises(ValueError, match="overlap"):
        Terms.from_dates([("2026-09-01", "2026-12-18"), ("2026-12-01", "2027-03-26")])


@pytest.mark.parametrize("period", [Rolling(window_s=100.0), CalendarDay(), Lifetime()])
def test_concurrent_charges_at_a_window_boundary_stay_exact(db: Path | str, period: object) -> None:
    # Prepare: the window is full, and the clock sits exactly where the old spend drops out (or not).
    clock = Clock(DAY * 100)
    ledger = _ledger(db, BudgetRule(cap_epsilon=4.0, period=period), clock)  # type: ignore[arg-type]
    for _ in range(4):
        _charge(ledger)
    clock.now = DAY * 101  # rolling: 100 s and far more later; calendar: the next day starts now
    # Execute: 40 concurrent charges where 4 fit (0 for a lifetime cap).
    served, refused = [], []

    def attempt() -> None:
        try:
            _charge(ledger)
            served.append(1)
        except BudgetExceeded:
            refused.append(1)

    threads = [threading.Thread(target=attempt) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Assert
    expected = 0 if isinstance(period, Lifetime) else 4
    assert (len(served), len(refused)) == (expected, 40 - expected)
    status = ledger.status(T, S)
    assert status["spent_epsilon"] == 4.0 and status["lifetime_epsilon"] == 4.0 + expected


def test_the_same_charges_under_different_periods_have_the_same_lifetime_total(db: Path | str) -> None:
    clock = Clock(DAY * 10)
    ledger = _ledger(db, BudgetRule(cap_epsilon=1e6, period=Rolling(window_s=DAY)), clock)
    for k in range(6):
        clock.now = DAY * 10 + k * DAY / 2
        _charge(ledger, epsilon=0.5)
    for period in (Lifetime(), Rolling(window_s=DAY), CalendarDay(), CalendarWeek()):
        status = ledger.status(T, S, rule=BudgetRule(cap_epsilon=1e6, period=period))
        assert status["lifetime_epsilon"] == pytest.approx(3.0) and status["queries"] == 6
    assert ledger.status(T, S, rule=BudgetRule(cap_epsilon=1e6, period=Lifetime()))["spent_epsilon"] == pytest.approx(3.0)
    assert ledger.status(T, S)["spent_epsilon"] == pytest.approx(1.5)  # the last day: t = 11.5, 12 and 12.5 days
