"""providers.sdk_errors: Retry-After hints are read or ignored, never raised; SDK errors map onto the tree."""

from __future__ import annotations

import email.utils

import httpx
import openai
import pytest

from providers.errors import EntityRejected, EntityUnavailable
from providers.sdk_errors import MAX_RETRY_AFTER_S, map_sdk_errors, parse_retry_after

NOW = 1_700_000_000.0  # an injected clock: HTTP dates are compared with it


def _clock() -> float:
    return NOW


def _headers(**values: str) -> httpx.Headers:
    return httpx.Headers({name.replace("_", "-"): value for name, value in values.items()})


@pytest.mark.parametrize(
    "headers,expected",
    [
        (_headers(retry_after="2"), 2.0),
        (_headers(retry_after="1.5"), 1.5),
        (_headers(retry_after="0"), 0.0),
        (_headers(retry_after_ms="250"), 0.25),
        (_headers(retry_after_ms="not-a-number", retry_after="3"), 3.0),  # a bad ms hint falls back
        (_headers(retry_after=email.utils.formatdate(NOW + 30, usegmt=True)), 30.0),  # IMF-fixdate
        (_headers(retry_after="Tuesday, 14-Nov-23 22:13:50 GMT"), 30.0),  # RFC 850
        (_headers(retry_after="Tue Nov 14 22:13:50 2023"), 30.0),  # asctime, no zone: GMT
        (_headers(retry_after=email.utils.formatdate(NOW - 600, usegmt=True)), 0.0),  # in the past: now
    ],
    ids=["seconds", "fraction", "zero", "ms", "bad-ms", "imf-date", "rfc850-date", "asctime-date", "past-date"],
)
def test_numeric_and_date_hints_are_read(headers: httpx.Headers, expected: float) -> None:
    assert parse_retry_after(headers, now=_clock) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    ["soon", "", "   ", "-1", "nan", "inf", "-inf", "1e999", "Mon, 99 Foo 2024 99:99:99 GMT", "2 seconds", "\x00", "½"],
)
def test_an_unreadable_hint_means_no_hint(value: str) -> None:
    assert parse_retry_after({"retry-after": value}, now=_clock) is None


@pytest.mark.parametrize(
    "value",
    ["1e308", "999999999", email.utils.formatdate(253402300799, usegmt=True)],
    ids=["1e308", "huge", "year-9999"],
)
def test_absurd_hints_are_capped(value: str) -> None:
    assert parse_retry_after({"retry-after": value}, now=_clock) == MAX_RETRY_AFTER_S


@pytest.mark.parametrize("headers", [None, {}, object(), {"retry-after": 5}, {"retry-after": b"\xff"}])
def test_odd_header_containers_and_values_never_raise(headers: object) -> None:
    assert parse_retry_after(headers, now=_clock) is None


def _status_error(code: int, **headers: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(code, headers=_headers(**headers), json={"error": {"message": "busy"}}, request=request)
    return openai.APIStatusError("busy", response=response, body=None)


def test_a_429_with_retry_after_soon_is_unavailable_without_a_hint() -> None:
    # Issue 14: "Retry-After: soon" used to escape map_sdk_errors as a ValueError and fail the diagnosis.
    with pytest.raises(EntityUnavailable) as caught, map_sdk_errors(openai, "gpt"):
        raise _status_error(429, retry_after="soon")

    assert caught.value.retry_after is None and caught.value.status_code == 429 and caught.value.entity == "gpt"


def test_a_429_with_a_date_hint_carries_the_seconds() -> None:
    with pytest.raises(EntityUnavailable) as caught, map_sdk_errors(openai, "gpt"):
        raise _status_error(429, retry_after=email.utils.formatdate(usegmt=True))

    assert caught.value.retry_after is not None and 0.0 <= caught.value.retry_after <= 1.0


def test_mapped_errors_do_not_chain_the_sdk_exception() -> None:
    # The SDK exception quotes the provider's reply; a traceback would print it whole.
    with pytest.raises(EntityRejected) as caught, map_sdk_errors(openai, "gpt"):
        raise _status_error(401)

    assert caught.value.__cause__ is None and caught.value.__suppress_context__
