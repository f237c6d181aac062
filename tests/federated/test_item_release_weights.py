"""The item release's weighting and shrinkage rules (issue 32): every response weighs the same for a student
whatever their proportion correct, the proportion's noise is the smaller of the two encodings, and a rarely answered
item starts at its group's value, not at the bank's mean or the Q-row fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from federated.item_release import ItemGroups, ItemSums, _scaled_sums, private_warm_start, response_weight
from federated.models import new_model
from qmatrix import example_qmatrix


def test_a_response_weighs_one_over_root_two_r_whatever_the_students_accuracy() -> None:
    # Prepare: one student always right, one always wrong, 9 responses each to distinct items
    students = np.repeat([0, 1], 9)
    cells = np.tile(np.arange(9), 2)
    scores = np.r_[np.ones(9), np.zeros(9)]

    # Execute
    correct, missed = _scaled_sums(students, cells, scores, 2, 9)

    # Assert: both students' responses weigh 1/√(2·9) (scaling (scores, responses) made the right one weigh less)
    np.testing.assert_allclose(correct + missed, np.full(9, 2 / np.sqrt(18)))
    np.testing.assert_allclose(correct, np.full(9, 1 / np.sqrt(18)))


def test_the_response_weight_is_exact_for_binary_responses() -> None:
    # Prepare: 30 students with 1 to 40 binary responses to distinct items, noiseless sums
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 40, size=30)
    students = np.repeat(np.arange(30), lengths)
    cells = np.concatenate([rng.choice(np.arange(1, 60), size=n, replace=False) for n in lengths])
    scores = (rng.random(len(students)) < rng.random(30)[students]).astype(float)
    correct, missed = _scaled_sums(students, cells, scores, 30, 60)
    weights = 1 / np.sqrt(2 * lengths[students])
    sums = ItemSums(correct, correct + missed, correct[:1], correct[:1] + missed[:1], 0.0)

    # Execute / Assert: the response-weighted mean weight, from the release and the public student count alone
    assert response_weight(sums, 30) == pytest.approx((weights**2).sum() / weights.sum(), rel=1e-9)


def test_a_rarely_answered_item_starts_at_its_group_not_at_the_fit_or_the_mean() -> None:
    # Prepare: a bank whose items in one group are all hard (proportion 0.2), with negligible noise; one item of that
    # group answered once, correctly
    q = example_qmatrix()
    model = new_model("higher-order-irt", q, seed=0)
    table = model.item_table(q)
    groups = ItemGroups.of(model, table)
    rows = table[:, -1].round().astype(int)
    target = groups.of_row[rows[0]]
    members = rows[groups.of_row[rows] == target]
    assert len(members) >= 2, "the example bank needs a group of two items"
    rare, others = members[0], members[1:]
    size = len(model.items) + 1
    count = np.full(size, 50.0)
    correct = 0.7 * count
    correct[others] = 0.2 * count[others]
    count[rare], correct[rare] = 1.0, 1.0
    group_count = np.bincount(groups.of_row[1:], weights=count[1:], minlength=len(groups))
    group_correct = np.bincount(groups.of_row[1:], weights=correct[1:], minlength=len(groups))
    sums = ItemSums(correct, count, group_correct, group_count, 1e-6)

    # Execute: each response weighing 1 (response_weight: Σ w² r = students / 2 over Σ w r = the responses)
    private_warm_start(model, table, groups, sums, students=int(2 * count[1:].sum()))

    # Assert: one correct response moves the rare item up from its hard group, but it stays nearer that group than
    # the bank's other items (proportion 0.7)
    _, easiness = model.item_parameters(torch.as_tensor(table))
    easy = easiness.detach().numpy()
    position = {int(r): i for i, r in enumerate(rows)}
    group_mean = np.mean([easy[position[int(r)]] for r in others])
    rest = np.mean([easy[position[int(r)]] for r in rows if groups.of_row[r] != target])
    rare_easiness = easy[position[int(rare)]]
    assert group_mean < 0 < rest
    assert group_mean < rare_easiness < rest and rare_easiness - group_mean < rest - rare_easiness
