"""How many more answers narrow a stack's measured interval, read from the interval it serves (issue 33, part 4):
its base never shrinks, so some widths no number of answers reaches; a diagnosis says which spread it served so a
stored one can be re-read."""

from __future__ import annotations

import pytest

from diagnosis import DiagnosisPipeline, PosteriorAggregator, StackingAggregator
from diagnosis import measured
from diagnosis.measured import MeasuredError, answers_to_narrow, measured_intervals
from qmatrix import Response
from tests.factories import FakeEntity, diagnosis_request

ERROR = MeasuredError(base=0.1, per_answer=2.0, rows=100)


def _width(mastery: float, answers: int, error: MeasuredError, level: float = 0.9) -> float:
    low, high = measured_intervals({"k": mastery}, error, {"k": answers}, level)["k"]
    return high - low


@pytest.mark.parametrize(("mastery", "answers", "width", "level"), [
    (0.5, 0, 0.3, 0.9), (0.7, 3, 0.3, 0.9), (0.7, 30, 0.3, 0.9), (0.2, 1, 0.25, 0.8), (0.95, 0, 0.06, 0.9),
    (0.5, 2, 0.26, 0.9),  # just above the floor (0.254): many answers
])
def test_the_count_is_the_fewest_answers_at_which_the_served_interval_is_that_narrow(
        mastery: float, answers: int, width: float, level: float) -> None:
    # Execute
    narrowing = answers_to_narrow(mastery, answers, width, ERROR, level)

    # Assert: measured_intervals' own width is at most the target after k more answers, and wider after k - 1
    assert narrowing.more is not None and narrowing.more >= 1
    assert _width(mastery, answers + narrowing.more, ERROR, level) <= width
    if narrowing.more > 1:
        assert _width(mastery, answers + narrowing.more - 1, ERROR, level) > width
    assert narrowing.floor == pytest.approx(_width(mastery, 10**12, ERROR, level), abs=1e-6)


def test_an_interval_already_narrow_enough_needs_one_answer_not_zero() -> None:
    assert answers_to_narrow(0.5, 500, 0.3, ERROR).more == 1


def test_when_the_base_alone_keeps_the_interval_wider_no_number_of_answers_is_given() -> None:
    # Prepare: a base of 0.6 alone gives a 90 % interval at 0.5 wider than 0.3, however many answers come
    error = MeasuredError(base=0.6, per_answer=2.0, rows=100)

    # Execute
    narrowing = answers_to_narrow(0.5, 2, 0.3, error)

    # Assert: no count, and the floor is the width the interval tends to (√base on the logit scale)
    assert narrowing.more is None
    assert narrowing.floor == pytest.approx(_width(0.5, 10**12, error), abs=1e-6) and narrowing.floor > 0.3
    assert _width(0.5, 10**6, error) > 0.3
    # the same spread narrows a concept far from one half (the logit scale squeezes it there)
    assert answers_to_narrow(0.95, 2, 0.3, error).more is not None


def test_a_spread_with_nothing_per_answer_narrows_at_once_or_never() -> None:
    flat = MeasuredError(base=0.05, per_answer=0.0, rows=100)
    assert answers_to_narrow(0.5, 0, 0.3, flat).more == 1
    assert answers_to_narrow(0.5, 0, 0.1, flat).more is None


async def test_a_diagnosis_says_which_measured_spread_its_intervals_have_and_only_then() -> None:
    # Prepare: a stack with a measured error; the same entity answering uncalibrated, and through a posterior
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.7)})
    stack = StackingAggregator(weights={}, intercepts={}, pooled_weights={"a": 1.0})
    stack.measured_error = MeasuredError(base=0.1, per_answer=2.0, rows=100)
    request = diagnosis_request(responses=[Response(item_id="q01", correct=True)])

    # Execute
    stacked = await pipeline.diagnose(request, stack)
    plain = await pipeline.diagnose(request)
    posterior = await pipeline.diagnose(request, PosteriorAggregator())

    # Assert: the measured intervals come with their spread; an uncalibrated mean or a posterior carries none
    assert stacked.intervals and stacked.interval_error == stack.measured_error
    assert plain.interval_error is None and posterior.interval_error is None


async def test_no_spread_when_the_measured_members_did_not_all_answer() -> None:
    # Prepare: the error was measured with a and b answering; b is not there, so no interval is served
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.7)})
    stack = StackingAggregator(weights={}, intercepts={}, pooled_weights={"a": 0.5, "b": 0.5})
    stack.measured_error = MeasuredError(base=0.1, per_answer=2.0, rows=100, members=("a", "b"))

    # Execute
    result = await pipeline.diagnose(diagnosis_request(), stack)

    # Assert
    assert result.intervals == {} and result.interval_error is None


def test_a_target_within_rounding_of_the_floor_returns_at_once() -> None:
    # Prepare: base set so the floor width sits a hair (1e-12, relative) below the target: the count is astronomic
    # and the width changes below float resolution near it (the guide stepped one answer at a time: it hung)
    z, target = measured._z(0.9), 0.3
    low, high = 0.0, 5.0
    for _ in range(200):  # the sd whose interval at 0.5 is exactly the target
        mid = (low + high) / 2
        low, high = (mid, high) if measured._width(0.5, z * mid) <= target else (low, mid)
    error = MeasuredError(base=(low * (1 - 1e-12)) ** 2, per_answer=1.0, rows=100)

    # Execute
    narrowing = answers_to_narrow(0.5, 0, target, error)

    # Assert: an answer, not a hang (a huge count or none: either says "more answers alone will not do")
    assert narrowing.more is None or narrowing.more > 10**6
