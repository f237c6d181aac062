"""The model: monotone in correctness, inductive over items, and it learns what DINA generated."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from federated import (
    CDModel,
    LocalConfig,
    diagnose,
    evaluate_masked,
    hidden_mask,
    predict_mastery,
    predict_mastery_batch,
    predict_response_proba,
    train_local,
)
from qmatrix import QMatrix, QMatrixError, Response, StudentResponses, example_qmatrix
from tests.federated.conftest import Prepared


def _scrambled(model: CDModel, seed: int) -> CDModel:
    """The same architecture with large random weights: monotonicity must hold for ANY weights."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 3)
    return model


def _flip_cases(model: CDModel, n: int, seed: int, *, text_dim: int = 0):
    """n random students (random items observed, random scores, some partial credit) and one
    index per student whose score is raised; returns (feats, low scores, high scores, observed, flipped item)."""
    rng = np.random.default_rng(seed)
    k, n_items, width = len(model.concepts), 15, 10
    q = (rng.random((n_items, k)) < 0.35).astype(np.float32)
    q[np.arange(n_items), rng.integers(0, k, n_items)] = 1.0
    text = rng.normal(size=(n_items, text_dim)).astype(np.float32)
    table = torch.from_numpy(np.concatenate([q, text], axis=1))
    items = torch.from_numpy(rng.integers(0, n_items, (n, width)))
    observed = torch.from_numpy(rng.random((n, width)) < 0.7)
    flip = torch.from_numpy(rng.integers(0, width, n))
    observed[torch.arange(n), flip] = True
    low = torch.from_numpy(np.where(rng.random((n, width)) < 0.3, rng.random((n, width)), rng.random((n, width)) < 0.5)
                           .astype(np.float32))
    low[torch.arange(n), flip] = torch.from_numpy(rng.random(n).astype(np.float32) * 0.5)
    high = low.clone()
    high[torch.arange(n), flip] = torch.from_numpy(0.5 + rng.random(n).astype(np.float32) * 0.5)
    return table[items], low, high, observed, q[items.numpy()[np.arange(n), flip.numpy()]]


@pytest.mark.parametrize("interaction", ["dina", "ncd"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_raising_a_score_never_lowers_any_mastery(interaction: str, seed: int) -> None:
    # Prepare: random-weight models, 2000 random students each with one score raised
    model = _scrambled(CDModel([f"c{k}" for k in range(5)], text_dim=4, interaction=interaction), seed)
    feats, low, high, observed, item_q = _flip_cases(model, 2000, seed, text_dim=4)

    # Execute
    with torch.no_grad():
        before, after = model.mastery(feats, low, observed), model.mastery(feats, high, observed)

    # Assert: no concept drops (in particular none the flipped item requires), and some rise
    assert torch.all(after >= before - 1e-6)
    required = torch.from_numpy(item_q).bool()
    assert torch.all(after[required] >= before[required] - 1e-6)
    assert (after - before)[required].max() > 1e-3


def test_trained_model_is_monotone_incorrect_to_correct(trained: CDModel, sim: Prepared) -> None:
    # Prepare: every test student, every incorrect response flipped to correct, one at a time
    feats_all, scores_all, observed_all = sim.test.batch(range(len(sim.test)))
    wrong = (scores_all == 0) & observed_all
    s_idx, i_idx = torch.nonzero(wrong, as_tuple=True)
    high = scores_all[s_idx].clone()
    high[torch.arange(len(s_idx)), i_idx] = 1.0

    # Execute
    with torch.no_grad():
        before = trained.mastery(feats_all[s_idx], scores_all[s_idx], observed_all[s_idx])
        after = trained.mastery(feats_all[s_idx], high, observed_all[s_idx])

    # Assert
    assert len(s_idx) > 500
    assert torch.all(after >= before - 1e-6)
    required = feats_all[s_idx, i_idx, : len(trained.concepts)].bool()
    assert (after - before)[required].min() > 0


def test_mastery_and_probabilities_are_in_unit_interval(trained: CDModel, sim: Prepared) -> None:
    feats, scores, observed = sim.test.batch(range(len(sim.test)))
    with torch.no_grad():
        mastery = trained.mastery(feats, scores, observed)
        proba = trained.response_proba(mastery, feats)
    assert mastery.shape == (len(sim.test), 6)
    assert torch.all((mastery > 0) & (mastery < 1))
    assert torch.all((proba > 0) & (proba < 1))


def test_same_generator_seed_builds_identical_models() -> None:
    a = CDModel(["x", "y"], text_dim=3, generator=torch.Generator().manual_seed(5))
    b = CDModel(["x", "y"], text_dim=3, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_masked_objective_lowers_held_out_loss(sim: Prepared) -> None:
    # Prepare
    model = CDModel(sim.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))
    hidden = hidden_mask(sim.test.observed, frac=0.2, generator=torch.Generator().manual_seed(0))
    before = evaluate_masked(model, sim.test, hidden)

    # Execute
    result = train_local(model, sim.train, config=LocalConfig(epochs=5), generator=torch.Generator().manual_seed(1))
    after = evaluate_masked(model, sim.test, hidden)

    # Assert
    assert after.loss < before.loss - 0.02
    assert result.steps == 5 * -(-len(sim.train) // 32)


def test_trained_on_dina_predicts_held_out_responses_and_recovers_attributes(trained: CDModel, sim: Prepared) -> None:
    # Execute: AUC on hidden responses of held-out students; mastery vs. the simulated truth
    hidden = hidden_mask(sim.test.observed, frac=0.2, generator=torch.Generator().manual_seed(0))
    evaluation = evaluate_masked(trained, sim.test, hidden)
    students = [s for s in sim.dataset.students if s.student_id in set(sim.test_ids)]
    predicted = predict_mastery_batch(trained, sim.dataset.qmatrix, students)

    # Assert (the Bayes-optimal AUC with the true DINA parameters is 0.83 here)
    assert evaluation.auc > 0.78
    concepts = sim.dataset.qmatrix.concepts
    estimate = np.array([[p[c] for c in concepts] for p in predicted])
    truth = np.array([[sim.dataset.true_mastery[s.student_id][c] for c in concepts] for s in students])
    correlations = [np.corrcoef(estimate[:, k], truth[:, k])[0, 1] for k in range(len(concepts))]
    assert min(correlations) > 0.5 and np.mean(correlations) > 0.7


def _with_new_item(q: QMatrix) -> QMatrix:
    matrix = np.vstack([q.matrix, np.eye(1, len(q.concepts), 2, dtype=np.int8)])
    return QMatrix.from_matrix(id="example-plus", concepts=q.concepts, item_ids=[*q.item_ids, "new01"], matrix=matrix)


def test_unseen_items_are_used_and_flagged(trained: CDModel) -> None:
    # Prepare: a bank with one item no training student answered (it assesses concept 3)
    bank = _with_new_item(example_qmatrix())
    concept = bank.concepts[2]
    right = StudentResponses(student_id="s", responses=(Response(item_id="q01", correct=True),
                                                        Response(item_id="new01", correct=True)))
    wrong = StudentResponses(student_id="s", responses=(Response(item_id="q01", correct=True),
                                                        Response(item_id="new01", correct=False)))

    # Execute
    d_right, d_wrong = diagnose(trained, bank, right), diagnose(trained, bank, wrong)
    proba = predict_response_proba(trained, bank, right, ["new01", "q05"])

    # Assert
    assert d_right.unseen_items == ("new01",) and d_right.has_unseen_items
    assert set(d_right.mastery) == set(bank.concepts)
    assert d_right.mastery[concept] > d_wrong.mastery[concept]
    assert set(proba) == {"new01", "q05"} and all(0 < p < 1 for p in proba.values())
    assert diagnose(trained, bank, StudentResponses(student_id="t", responses=(
        Response(item_id="q01", correct=True),))).unseen_items == ()


def test_partial_credit_scores_are_accepted(trained: CDModel) -> None:
    q = example_qmatrix()

    def one(score: float) -> StudentResponses:
        return StudentResponses(student_id="s", responses=(Response(item_id="q01", correct=score),))

    half, full = predict_mastery(trained, q, one(0.5)), predict_mastery(trained, q, one(1.0))
    assert full[q.concepts[0]] > half[q.concepts[0]]


def test_unknown_item_or_concept_raises(trained: CDModel) -> None:
    q = example_qmatrix()
    with pytest.raises(QMatrixError, match="nope"):
        predict_mastery(trained, q, StudentResponses(student_id="s", responses=(Response(item_id="nope", correct=1),)))
    other = QMatrix.from_matrix(id="other", concepts=["alien"], item_ids=["a"], matrix=[[1]])
    with pytest.raises(QMatrixError, match="alien"):
        predict_mastery(trained, other, StudentResponses(student_id="s", responses=(Response(item_id="a", correct=1),)))


def test_state_dict_round_trip_keeps_seen_items(trained: CDModel) -> None:
    clone = CDModel(trained.concepts)
    clone.load_state_dict(trained.state_dict())
    assert clone.seen_item_ids == trained.seen_item_ids and clone.seen_item_ids
    with pytest.raises(ValueError, match="config"):
        CDModel(trained.concepts, interaction="ncd").load_state_dict(trained.state_dict(), strict=False)
