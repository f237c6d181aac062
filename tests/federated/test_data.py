"""Tensors, splits, partitions, masks and item features."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from federated import (
    dirichlet_partition,
    encode_students,
    hash_text,
    hidden_mask,
    iid_partition,
    item_features,
    split_student_indices,
)
from qmatrix import QMatrixError, Response, StudentResponses, example_qmatrix
from tests.federated.conftest import Prepared


def test_encoding_pads_students_and_keeps_observed_first() -> None:
    # Prepare
    q = example_qmatrix()
    students = [
        StudentResponses(student_id="a", responses=(Response(item_id="q03", correct=True),)),
        StudentResponses(student_id="b", responses=(Response(item_id="q01", correct=0.5),
                                                    Response(item_id="q12", correct=False))),
    ]

    # Execute
    data = encode_students(q, students, concepts=q.concepts, text_dim=8)

    # Assert
    assert data.item_index.tolist() == [[2, 0], [0, 11]]
    assert data.observed.tolist() == [[True, False], [True, True]]
    assert data.scores.tolist() == [[1.0, 0.0], [0.5, 0.0]]
    assert data.features.shape == (12, 6 + 8)
    assert data.answered_items() == {"q01", "q03", "q12"}
    assert data.subset([0]).item_index.shape == (1, 1)


def test_unknown_items_in_responses_raise_naming_them() -> None:
    q = example_qmatrix()
    bad = [StudentResponses(student_id="a", responses=(Response(item_id="zz9", correct=True),))]
    with pytest.raises(QMatrixError, match="zz9"):
        encode_students(q, bad, concepts=q.concepts, text_dim=0)


def test_item_features_follow_model_concept_order_and_hash_text_stably() -> None:
    q = example_qmatrix()
    reversed_concepts = tuple(reversed(q.concepts))
    table = item_features(q, reversed_concepts, text_dim=16)
    assert np.array_equal(table[:, :6], q.matrix[:, ::-1])
    assert np.allclose(np.linalg.norm(table[:, 6:], axis=1), 1.0)
    assert np.array_equal(hash_text("Compute 2/5 + 1/3.", dim=16), hash_text("compute 2/5 + 1/3.", dim=16))
    assert not np.any(hash_text(None, dim=16))


@pytest.mark.parametrize("seed", range(3))
def test_hidden_mask_hides_about_a_fifth_and_leaves_context(sim: Prepared, seed: int) -> None:
    observed = sim.train.observed.clone()
    observed[0, 1:] = False  # a student with one response gets nothing hidden
    observed[1, 2:] = False  # two responses: exactly one hidden
    hidden = hidden_mask(observed, frac=0.2, generator=torch.Generator().manual_seed(seed))
    assert not torch.any(hidden & ~observed)
    assert hidden[0].sum() == 0 and hidden[1].sum() == 1
    assert torch.all((observed & ~hidden)[observed.sum(1) >= 1].any(1))
    frac = hidden[2:].sum() / observed[2:].sum()
    assert 0.15 < float(frac) < 0.25
    same = hidden_mask(observed, frac=0.2, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(hidden, same)


def test_student_split_is_disjoint_complete_and_seeded() -> None:
    split = split_student_indices(100, rng=np.random.default_rng(4), validation=0.1, test=0.2)
    together = np.concatenate([split.train, split.validation, split.test])
    assert sorted(together.tolist()) == list(range(100))
    assert (len(split.train), len(split.validation), len(split.test)) == (70, 10, 20)
    assert np.array_equal(split.test, split_student_indices(100, rng=np.random.default_rng(4)).test)


def test_iid_partition_deals_everyone_once_in_near_equal_shares() -> None:
    parts = iid_partition(101, n_clients=4, rng=np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(101))
    assert {len(p) for p in parts} <= {25, 26}


def _spread(parts: list[np.ndarray], ability: np.ndarray) -> float:
    """Std. dev. of client mean ability: 0 when clients look alike."""
    return float(np.std([ability[p].mean() for p in parts]))


def test_dirichlet_partition_small_alpha_makes_clients_differ() -> None:
    # Prepare
    ability = np.random.default_rng(0).random(1000)

    # Execute
    skewed = [dirichlet_partition(ability, n_clients=5, alpha=0.1, rng=np.random.default_rng(s), min_size=5)
              for s in range(5)]
    mixed = [dirichlet_partition(ability, n_clients=5, alpha=1000.0, rng=np.random.default_rng(s), min_size=5)
             for s in range(5)]

    # Assert
    for parts in skewed + mixed:
        assert sorted(np.concatenate(parts).tolist()) == list(range(1000))
        assert min(len(p) for p in parts) >= 5
    assert np.mean([_spread(p, ability) for p in skewed]) > 5 * np.mean([_spread(p, ability) for p in mixed])


def test_dirichlet_partition_refuses_impossible_sizes() -> None:
    with pytest.raises(ValueError):
        dirichlet_partition(np.zeros(5), n_clients=3, alpha=1.0, rng=np.random.default_rng(0), min_size=2)
