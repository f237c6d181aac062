"""local-fed v2 (``HigherOrderCDM``): monotone fold-in, shrinkage and intervals, per-item parameters with the
feature fallback, per-item FedAvg, the warm start, and loading next to v1 models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from federated import ModelRegistry, encode_students, hidden_mask
from federated.hocdm import HigherOrderCDM
from federated.inprocess import average_rows
from federated.itembank import FREE, POPULATION, SCALES, Scale
from federated.metrics import evaluate_masked
from federated.model import CDModel
from federated.models import build_model, new_model
from federated.publish import PublishOptions
from federated.train import TrainingConfig, train_federated
from qmatrix import Dataset, Item, QMatrix, QMatrixError, StudentResponses, example_qmatrix, simulate_dina
from qmatrix.responses import Response

Q = example_qmatrix()


def _randomised(seed: int, scale: Scale = FREE) -> HigherOrderCDM:
    model = HigherOrderCDM(Q.concepts, items=Q.item_ids, scale=scale)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 1.5)
    return model


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_correct_answer_never_lowers_any_mastery(seed: int, scale: Scale) -> None:
    # Prepare: arbitrary parameters (monotonicity must hold for all of them, not only trained ones), on either scale
    model = _randomised(seed, scale)
    feats = torch.from_numpy(model.item_table(Q)).unsqueeze(0)
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    for _ in range(40):
        scores = (torch.rand(1, len(Q.items), generator=generator) < 0.5).float()
        context = torch.rand(1, len(Q.items), generator=generator) < 0.8
        before = model.mastery(feats, scores, context)
        for j in torch.nonzero((scores[0] == 0) & context[0]).flatten():
            # Execute: one wrong answer becomes right
            flipped = scores.clone()
            flipped[0, j] = 1.0
            worst = min(worst, float((model.mastery(feats, flipped, context) - before).min()))
    # Assert (the fold-in converges to the posterior mode; 1e-5 allows for its tolerance)
    assert worst > -1e-5


def test_few_responses_stay_near_the_prior_with_a_wider_interval() -> None:
    model = HigherOrderCDM(Q.concepts, items=Q.item_ids)
    feats = torch.from_numpy(model.item_table(Q)).unsqueeze(0).expand(2, -1, -1)
    scores = torch.ones(2, len(Q.items))
    context = torch.zeros(2, len(Q.items), dtype=torch.bool)
    context[0, :2] = True  # two right answers
    context[1, :] = True  # every answer right

    mastery, low, high = model.mastery_interval(feats, scores, context)

    assert torch.all(low <= mastery) and torch.all(mastery <= high)
    assert torch.all(high[0] - low[0] > high[1] - low[1])  # less evidence, wider interval
    assert torch.all(mastery[1] > mastery[0])  # more right answers, more mastery
    # a concept the two answers do not assess still moves up: the general ability links the concepts
    untouched = [k for k, c in enumerate(Q.concepts) if c not in Q.items[0].concepts + Q.items[1].concepts]
    prior = model.mastery(feats[:1], scores[:1], torch.zeros_like(context[:1]))
    assert untouched and torch.all(mastery[0, untouched] > prior[0, untouched])


def test_the_pinned_model_starts_as_the_free_one_standardised() -> None:
    # Prepare: both kinds of prior as built, one student
    free, pinned = (HigherOrderCDM(Q.concepts, items=Q.item_ids, scale=scale) for scale in (FREE, POPULATION))
    feats = torch.from_numpy(free.item_table(Q)).unsqueeze(0)
    scores = (torch.arange(len(Q.items)) % 3 == 0).float().unsqueeze(0)
    context = torch.ones_like(scores, dtype=torch.bool)
    sd = float((free.prior()[1].pow(2) + free.prior()[2]).sqrt()[0])
    # Execute
    with torch.no_grad():
        predicted = free(feats, scores, context), pinned(feats, scores, context)
        theta = free.posterior(feats, scores, context)[0], pinned.posterior(feats, scores, context)[0]
    # Assert: the same predictions, abilities in units of the free prior's sd (an exact conversion at the start)
    assert torch.allclose(*predicted, atol=1e-6)
    assert torch.allclose(theta[0], theta[1] * sd, atol=1e-5)
    assert np.allclose(free.concept_correlation(), pinned.concept_correlation(), atol=1e-6)


def test_an_item_outside_the_bank_uses_the_feature_part_only() -> None:
    model = _randomised(3)
    inside = model.item_row(Q.items[0].id, Q.items[0].concepts)
    outside = model.item_row("never-seen", Q.items[0].concepts)
    assert inside[-1] == 1.0 and outside[-1] == 0.0
    alpha_in, c_in = model.item_parameters(torch.from_numpy(inside))
    alpha_out, c_out = model.item_parameters(torch.from_numpy(outside))
    # the bank item carries its own learned part; the new item falls back to its Q-row's
    assert float(c_in) != float(c_out)
    with torch.no_grad():
        model.item_delta.zero_()
    assert torch.allclose(torch.stack(model.item_parameters(torch.from_numpy(inside))),
                          torch.stack(model.item_parameters(torch.from_numpy(outside))))


def test_an_unknown_concept_is_refused_by_name() -> None:
    model = HigherOrderCDM(Q.concepts, items=Q.item_ids)
    other = QMatrix(id="other", concepts=("volcanoes",), items=(Item(id="v1", concepts=("volcanoes",)),))
    with pytest.raises(QMatrixError, match="volcanoes"):
        model.item_table(other)


def test_average_rows_weights_each_item_by_the_clients_that_saw_it() -> None:
    updates = [np.array([[1.0, 1.0], [2.0, 2.0], [5.0, 5.0]]), np.array([[3.0, 3.0], [0.0, 0.0], [7.0, 7.0]])]
    weights = [np.array([1.0, 4.0, 0.0]), np.array([3.0, 0.0, 0.0])]

    out = average_rows(updates, weights)

    assert np.allclose(out[0], 2.5)  # (1·1 + 3·3) / 4
    assert np.allclose(out[1], 2.0)  # only the first client saw item 1
    assert np.allclose(out[2], 0.0)  # nobody saw item 2: no update


def test_warm_start_puts_each_intercept_at_its_pooled_proportion_correct() -> None:
    model = HigherOrderCDM(Q.concepts, items=Q.item_ids)
    table = model.item_table(Q)
    correct = np.zeros(len(Q.items) + 1)
    count = np.zeros(len(Q.items) + 1)
    correct[1], count[1] = 90.0, 100.0  # item 0: 90 % right
    correct[2], count[2] = 10.0, 100.0  # item 1: 10 % right

    model.warm_start(table, correct, count, prior_weight=0.0)

    _, c = model.item_parameters(torch.from_numpy(table))
    assert float(c[0]) == pytest.approx(np.log(9), abs=1e-4)
    assert float(c[1]) == pytest.approx(-np.log(9), abs=1e-4)
    assert float(c[2]) == pytest.approx(0.0, abs=1e-6)  # unseen: left at the feature part


def _bank() -> tuple[QMatrix, Dataset]:
    """SIMULATED students whose items differ strongly in difficulty within one Q-row (what v1 cannot see)."""
    concepts = ("a", "b")
    items = tuple(Item(id=f"i{k}", concepts=(concepts[k % 2],)) for k in range(16))
    q = QMatrix(id="bank", concepts=concepts, items=items)
    rng = np.random.default_rng(0)
    easiness = np.linspace(-2.5, 2.5, len(items))
    students = []
    for s in range(400):
        theta = rng.normal(size=2) + rng.normal()
        p = 1 / (1 + np.exp(-(np.array([theta[k % 2] for k in range(len(items))]) * 1.5 + easiness)))
        y = rng.random(len(items)) < p
        students.append(StudentResponses(student_id=f"s{s}", responses=tuple(
            Response(item_id=i.id, correct=bool(v)) for i, v in zip(items, y))))
    return q, Dataset(name="bank-sim", qmatrix=q, students=students, simulated=True)


def test_training_learns_what_the_untrained_model_cannot(tmp_path: Path) -> None:
    # Prepare: the same held-out students and hidden responses for both models
    q, dataset = _bank()
    untrained = new_model("higher-order-irt", q, seed=0)
    test = encode_students(q, dataset.students[300:], table=untrained.item_table(q))
    hidden = hidden_mask(test.observed, frac=0.3, generator=torch.Generator().manual_seed(1))
    train = Dataset(name="bank-train", qmatrix=q, students=dataset.students[:300], simulated=True)

    # Execute
    result = train_federated(dataset=train, registry=tmp_path,
                             config=TrainingConfig(clients=3, rounds=5, seed=0, threads=1))

    # Assert: per-item difficulties make the trained model's predictions clearly better
    before, after = evaluate_masked(untrained, test, hidden).auc, evaluate_masked(result.model, test, hidden).auc
    assert after > before + 0.05, (before, after)
    assert result.manifest is not None and result.manifest["config"]["model"]["kind"] == "higher-order-irt"


def test_v1_and_v2_models_load_from_their_configs(tmp_path: Path) -> None:
    dataset = simulate_dina(Q, n_students=60, seed=1)
    registry = ModelRegistry(tmp_path)
    v1 = train_federated(dataset=dataset, registry=registry,
                         config=TrainingConfig(rounds=1, seed=0, model_kind="evidence-encoder"))
    v2 = train_federated(dataset=dataset, registry=registry, config=TrainingConfig(rounds=1, seed=0),
                         publish=PublishOptions(force=True))

    assert isinstance(registry.load(v1.version).model, CDModel)
    loaded = registry.load(v2.version).model
    assert isinstance(loaded, HigherOrderCDM) and loaded.items == Q.item_ids
    # a manifest written before model kinds existed has no "kind": it is v1
    legacy = {k: v for k, v in v1.model.config().items() if k != "kind"}
    assert isinstance(build_model(legacy), CDModel)
    state = v1.model.state_dict()
    state["_extra_state"] = {**state["_extra_state"], "config": legacy}
    build_model(legacy).load_state_dict(state)  # the v1 state saved without "kind" still loads
    with pytest.raises(ValueError, match="unknown model kind"):
        build_model({**legacy, "kind": "nonsense"})
