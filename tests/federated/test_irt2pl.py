"""The one-factor 2PL kind (irt-2pl): its fold-in, monotone mastery, serving interface and registry round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from federated.data import encode_dataset
from federated.irt2pl import IRT2PL
from federated.models import build_model, new_model
from federated.predict import diagnose_batch, predict_response_proba_batch
from federated.registry import ModelRegistry
from qmatrix import Dataset, QMatrix, Response, StudentResponses, example_qmatrix, simulate_dina


def _random_model(q: QMatrix, seed: int) -> IRT2PL:
    model = new_model("irt-2pl", q, seed=0)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    return model  # type: ignore[return-value]


def _students(q: QMatrix, n: int, seed: int) -> Dataset:
    return simulate_dina(q, n_students=n, seed=seed)


def test_fold_in_is_the_posterior_mode() -> None:
    # Prepare
    q = example_qmatrix()
    model = _random_model(q, seed=1)
    data = encode_dataset(_students(q, 5, seed=2), table=model.item_table(q))
    feats, scores, observed = data.batch(range(5))

    # Execute
    with torch.no_grad():
        theta, var = model.posterior(feats, scores, observed)

    # Assert: a grid search of the same log posterior finds the same mode
    alpha, c = model.item_parameters(feats)
    grid = torch.linspace(-6, 6, 24001)
    z = alpha.unsqueeze(-1) * grid + c.unsqueeze(-1)  # (B, L, G)
    y, w = scores.unsqueeze(-1), observed.unsqueeze(-1).float()
    log_post = (w * (y * torch.nn.functional.logsigmoid(z) + (1 - y) * torch.nn.functional.logsigmoid(-z))).sum(1)
    log_post = log_post - 0.5 * grid.pow(2)
    assert torch.allclose(theta, grid[log_post.argmax(-1)], atol=2e-3)
    assert bool((var > 0).all() and (var <= 1).all())  # the prior's variance is 1; evidence only narrows it


def test_mastery_never_falls_when_an_answer_turns_correct() -> None:
    q = example_qmatrix()
    for seed in range(5):
        model = _random_model(q, seed=seed)
        data = encode_dataset(_students(q, 8, seed=seed), table=model.item_table(q))
        feats, scores, observed = data.batch(range(8))
        with torch.no_grad():
            before = model.mastery(feats, scores, observed)
            for j in range(scores.shape[1]):
                flipped = scores.clone()
                flipped[:, j] = 1.0
                assert float((model.mastery(feats, flipped, observed) - before).min()) >= -1e-5


def test_serves_through_the_diagnosis_interface_and_reloads(tmp_path: Path) -> None:
    # Prepare: random parameters (so items and concepts differ)
    q = example_qmatrix()
    model = _random_model(q, seed=3)
    student = StudentResponses(student_id="s", responses=tuple(Response(item_id=i, correct=True) for i in q.item_ids[:4]))
    model.mark_seen(q.item_ids[:4])

    # Execute
    diagnosis = diagnose_batch(model, q, [student])[0]
    forecast = predict_response_proba_batch(model, q, [student], q.item_ids)[0]
    version, _ = ModelRegistry(tmp_path).publish(model, manifest={"qmatrix_id": q.id})
    loaded = ModelRegistry(tmp_path).load(version).model

    # Assert: one mastery in (0, 1) for every concept (one factor); read back through response_proba (and so
    # through the served forecasts' η = α·logit(mastery) + c) it gives the model's own point prediction; the
    # registry rebuilds the same kind with the same answers
    assert set(diagnosis.mastery) == set(q.concepts) and len(set(diagnosis.mastery.values())) == 1
    assert all(0 < m < 1 for m in diagnosis.mastery.values())
    data = encode_dataset(Dataset(name="s", qmatrix=q, students=[student]), table=model.item_table(q))
    feats, scores, observed = data.batch([0])
    with torch.no_grad():
        theta, _ = model.posterior(feats, scores, observed)
        targets = torch.as_tensor(model.item_table(q)).unsqueeze(0)
        direct = torch.sigmoid(model.response_logit(theta, targets))[0]
    np.testing.assert_allclose([forecast[i] for i in q.item_ids], direct.numpy(), atol=1e-4)
    assert isinstance(loaded, IRT2PL) and loaded.seen_item_ids == set(q.item_ids[:4])
    assert diagnose_batch(loaded, q, [student])[0].mastery == pytest.approx(diagnosis.mastery)
    assert isinstance(build_model(model.config()), IRT2PL)


def test_warm_start_puts_unseen_items_where_their_concepts_items_are() -> None:
    # Prepare: pooled counts where every item of the first concept is mostly right, the rest mostly wrong
    q = example_qmatrix()
    model = new_model("irt-2pl", q, seed=0)
    table = model.item_table(q)
    first = q.concepts[0]
    easy = np.array([first in item.concepts for item in q.items])
    count = np.zeros(len(q.items) + 1)
    count[1:] = 100.0
    correct = np.zeros_like(count)
    correct[1:] = np.where(easy, 90.0, 20.0)

    # Execute
    model.warm_start(table, correct, count)

    # Assert: an unseen item of the first concept falls back to an easier intercept than one of another concept;
    # each seen item still starts at its own logit
    with torch.no_grad():
        _, fallback = model.item_parameters(torch.as_tensor(np.stack([model.item_row("", [first]),
                                                                      model.item_row("", [q.concepts[1]])])))
    assert float(fallback[0]) > float(fallback[1])
    _, intercept = model.item_parameters(torch.as_tensor(table))
    pooled = (correct[1:] + 2 * correct[1:].sum() / count[1:].sum()) / (count[1:] + 2)
    np.testing.assert_allclose(intercept.detach().numpy(), np.log(pooled / (1 - pooled)), atol=1e-4)
