"""Seeded student splits, held-out responses and the proportion-correct truth rule (the evaluation's and the
gateway's calibration jobs share them)."""

from __future__ import annotations

import numpy as np
import pytest

from qmatrix import Response, example_qmatrix, holdout_responses, load_dataset, proportion_correct_truth, split_students


def test_splits_are_disjoint_seeded_and_complete() -> None:
    students = load_dataset("synthetic", synthetic_students=100, seed=0).students
    a, b = split_students(students, seed=3), split_students(students, seed=3)
    ids = lambda part: [s.student_id for s in part]  # noqa: E731
    assert ids(a.train) == ids(b.train) and ids(a.test) == ids(b.test)
    assert (len(a.train), len(a.validation), len(a.test)) == (60, 20, 20)
    assert not set(ids(a.train)) & set(ids(a.validation)) and not set(ids(a.validation)) & set(ids(a.test))


def test_holdout_keeps_at_least_one_response_each_side() -> None:
    responses = [Response(item_id=f"q{i:02d}", correct=True) for i in range(1, 11)]
    observed, held = holdout_responses(responses, fraction=0.2, rng=np.random.default_rng(0))
    assert len(observed) == 8 and len(held) == 2 and not {r.item_id for r in observed} & {r.item_id for r in held}


def test_paper_truth_is_proportion_correct_per_concept() -> None:
    q = example_qmatrix()
    truth = proportion_correct_truth(q, [Response(item_id="q01", correct=True), Response(item_id="q02", correct=False), Response(item_id="q11", correct=True)])
    assert truth == {"Add and subtract fractions": pytest.approx(2 / 3), "Solve two-step linear equations": 1.0}
