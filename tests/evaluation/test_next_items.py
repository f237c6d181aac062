"""``fedcd bench next-items``'s simulation (evaluation.next_items): which policies it compares and that each adaptive
policy ranks by its own criterion, on SIMULATED students of the example Q-matrix (untrained evidence model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from diagnosis.next_items import CRITERIA, SelectionRule, select
from evaluation.next_items import bench_policies, simulate, student_cases
from providers.item_response import items_to_forecast
from providers.local_fed import untrained_model
from providers.serving_bank import ServingBank, serving_bank
from qmatrix import Response, StudentResponses
from qmatrix.example import example_qmatrix
from qmatrix.splits import split_holdout

Q = example_qmatrix()


def _bank() -> ServingBank:
    untrained = untrained_model(tuple(Q.concepts))
    return serving_bank(untrained, items_to_forecast(Q), untrained=untrained)  # type: ignore[arg-type]


def _students(count: int) -> list[StudentResponses]:
    """SIMULATED: each student answers every item, correct with a per-student chance."""
    rng = np.random.default_rng(0)
    out = []
    for n in range(count):
        skill = rng.uniform(0.2, 0.8)
        out.append(StudentResponses(student_id=f"s{n}", responses=tuple(
            Response(item_id=i.id, correct=bool(rng.random() < skill)) for i in Q.items)))
    return out


def test_the_bench_compares_the_default_with_every_other_criterion() -> None:
    policies = bench_policies(3)
    default = SelectionRule().criterion
    assert policies[:2] == ("adaptive", "adaptive-r3") and policies[-2:] == ("random", "fixed")
    assert sorted(policies[2:-2]) == sorted(f"adaptive-{c}" for c in CRITERIA if c != default)


def test_each_adaptive_policy_follows_its_criterion(monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluation.next_items as bench

    asked: list[tuple[str, int]] = []  # (criterion, randomesque) of every selection, in order

    def recording(*args: Any, rule: SelectionRule, **kwargs: Any) -> Any:
        asked.append((rule.criterion, rule.randomesque))
        return select(*args, rule=rule, **kwargs)

    monkeypatch.setattr(bench, "select", recording)
    bank = _bank()
    students = _students(3)
    observed, held = split_holdout(students, 0)
    cases = student_cases(bank, observed, held, students)
    default = SelectionRule().criterion
    for policy, expected in [("adaptive", (default, 1)), ("adaptive-r3", (default, 3)),
                             *[(f"adaptive-{c}", (c, 1)) for c in CRITERIA], ("random", None)]:
        asked.clear()
        run = simulate(bank, cases, k_max=3, policies=(policy,))
        assert len(run.width[policy]) == 3 and len(run.auc[policy]) == 3
        assert all(a >= b - 1e-12 for a, b in zip(run.width[policy], run.width[policy][1:]))  # answers narrow
        assert set(asked) == ({expected} if expected else set()) and len(asked) == (3 * len(cases) if expected else 0)
