"""Planning a request (app.services.planning): the aggregator is built once per calibration record and option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import app.services.planning as planning
from app.services.planning import AggregatorCache
from tests.conftest import make_client
from tests.factories import FakeEntity


@dataclass(frozen=True)
class _Record:
    id: str
    version: int


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, str, str]]:
    made: list[tuple[object, str, str]] = []

    def counted(record, *, alpha, aggregation, estimate):  # type: ignore[no-untyped-def]
        made.append((record, aggregation, estimate))
        return object()

    monkeypatch.setattr(planning, "aggregator_for", counted)
    return made


def test_an_aggregator_is_built_once_per_record_and_option(builds: list[tuple[object, str, str]]) -> None:
    # Prepare
    cache = AggregatorCache(alpha=0.3)
    first, refit = _Record("cal-1", 1), _Record("cal-2", 2)

    # Execute
    same = [cache.get(first, aggregation="auto", estimate="mean") for _ in range(3)]
    other = cache.get(first, aggregation="mean", estimate="mean")
    newer = cache.get(refit, aggregation="auto", estimate="mean")
    uncalibrated = [cache.get(None, aggregation="auto", estimate="median") for _ in range(2)]

    # Assert
    assert same[0] is same[1] is same[2] and other is not same[0] and newer is not same[0]
    assert uncalibrated[0] is uncalibrated[1]
    assert builds == [(first, "auto", "mean"), (first, "mean", "mean"), (refit, "auto", "mean"), (None, "auto", "median")]


def test_the_cache_keeps_at_most_its_size(builds: list[tuple[object, str, str]]) -> None:
    cache = AggregatorCache(alpha=0.3, max_entries=2)
    for n in range(3):
        cache.get(_Record(f"cal-{n}", 1), aggregation="auto", estimate="mean")
    cache.get(_Record("cal-0", 1), aggregation="auto", estimate="mean")  # the oldest went out: built again
    assert len(builds) == 4


def test_diagnoses_reuse_the_aggregator_instead_of_rebuilding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = planning.aggregator_for
    made: list[object] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(planning, "aggregator_for", counted)
    body = {"qmatrix_id": "example-prealgebra", "responses": [{"item_id": "q01", "correct": True}]}
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}) as client:
        for n in range(3):
            assert client.post("/v1/diagnose", json={**body, "student_id": f"s{n}"}).status_code == 200
    assert len(made) == 1
