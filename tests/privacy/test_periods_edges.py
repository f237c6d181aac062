"""Terms at the calendar's edges: every problem is a ValueError naming the term, never an OverflowError (issue 20)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from privacy import CalendarDay, Terms, iso_utc

LAST_SECOND = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("timezone", ["UTC", "America/New_York", "Asia/Tokyo", "Pacific/Kiritimati"])
def test_a_term_ending_on_the_last_day_runs_to_the_last_second(timezone: str) -> None:
    terms = Terms.from_dates([("2026-09-01", "9999-12-31")], timezone=timezone)
    assert terms.terms[0][1] == LAST_SECOND
    window = Terms.from_dates([("2026-09-01", "2026-12-18"), ("9999-12-31", "9999-12-31")], timezone=timezone).window(
        datetime(2027, 1, 1, tzinfo=UTC).timestamp()
    )
    assert iso_utc(window.renews_at)[:10] in ("9999-12-30", "9999-12-31")  # shown, not raised


def test_a_term_ends_at_the_next_local_midnight_as_before() -> None:
    [(start, end)] = Terms.from_dates([("2026-03-01", "2026-03-31")], timezone="Europe/Berlin").terms
    assert datetime.fromtimestamp(end, UTC) == datetime(2026, 3, 31, 22, tzinfo=UTC)  # CEST from March 29
    assert datetime.fromtimestamp(start, UTC) == datetime(2026, 2, 28, 23, tzinfo=UTC)


@pytest.mark.parametrize(("terms", "timezone", "message"), [
    ([("0001-01-01", "0001-01-31")], "Asia/Tokyo", r"terms\[0\]\.start: .*outside the years 1-9999"),
    ([("2026-09-01", "2026-12-18"), ("2027-01-05", "2027-02-30")], "UTC", r"terms\[1\]\.end: '2027-02-30'"),
    ([("0000-01-01", "2026-01-01")], "UTC", r"terms\[0\]\.start"),
    ([("2026-01-02", "2026-01-01")], "UTC", r"terms\[0\]: the end"),
    ([("2026-01-01", "2026-01-02")], "zone.tab", "unknown time zone"),
    ([("2026-01-01", "2026-01-02")], "", "unknown time zone"),
])
def test_impossible_terms_are_value_errors_naming_the_term(terms: list, timezone: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Terms.from_dates(terms, timezone=timezone)


def test_a_term_starting_on_the_first_day_in_utc_or_west_of_it_is_fine() -> None:
    assert Terms.from_dates([("0001-01-01", "0001-01-31")], timezone="America/New_York").terms
    assert iso_utc(Terms.from_dates([("0001-01-01", "0001-01-31")]).terms[0][0]) == "0001-01-01T00:00:00Z"


@pytest.mark.parametrize(("ts", "shown"), [
    (1e20, "9999-12-31T23:59:59Z"), (-1e20, "0001-01-01T00:00:00Z"), (LAST_SECOND, "9999-12-31T23:59:59Z"),
    (float("inf"), "9999-12-31T23:59:59Z"), (None, None), (float("nan"), None),
])
def test_iso_utc_never_raises(ts: float | None, shown: str | None) -> None:
    assert iso_utc(ts) == shown


def test_an_unknown_calendar_zone_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown time zone"):
        CalendarDay(timezone="zone.tab")
