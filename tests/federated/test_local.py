"""Local training: per-student clipping in DP-SGD, updates as new - old, FedProx, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import functional_call

from federated import (
    CDModel,
    LocalConfig,
    StudentDP,
    clipped_grad_sum,
    get_parameters,
    hidden_mask,
    l2_norm,
    masked_bce,
    train_local,
)
from tests.federated.conftest import Prepared


def _manual_clipped_sum(model: torch.nn.Module, loss_of, examples, clip_norm: float):
    """Reference: one backward pass per example, clip, add up."""
    total = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    norms = []
    for example in zip(*examples, strict=True):
        model.zero_grad()
        loss_of(model, *example).backward()
        grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads.values()))
        norms.append(float(norm))
        for name, g in grads.items():
            total[name] += g * min(1.0, clip_norm / float(norm))
    return total, norms


def test_clipped_sum_matches_per_example_loop_on_a_tiny_model() -> None:
    # Prepare: a 3->2 linear model, 6 examples, clip so that some are clipped and some not
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    x = torch.randn(6, 3, generator=g) * torch.tensor([[0.1], [0.5], [1], [2], [4], [8]])
    y = torch.randn(6, 2, generator=g)

    def loss_fn(params, xi, yi):
        return ((functional_call(model, params, (xi[None],)) - yi) ** 2).sum()

    params = {name: p.detach() for name, p in model.named_parameters()}

    # Execute
    summed, norms = clipped_grad_sum(loss_fn, params, (x, y), clip_norm=5.0)
    expected, expected_norms = _manual_clipped_sum(
        model, lambda m, xi, yi: ((m(xi[None]) - yi) ** 2).sum(), (x, y), 5.0
    )

    # Assert
    assert norms.tolist() == pytest.approx(expected_norms, rel=1e-5)
    assert (norms > 5.0).any() and (norms < 5.0).any()
    for name in expected:
        assert torch.allclose(summed[name], expected[name], atol=1e-5)


def test_clipped_sum_matches_per_student_loop_on_the_cd_model(sim: Prepared) -> None:
    # Prepare: 8 students' masked-response losses
    model = CDModel(sim.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))
    feats, scores, observed = sim.train.batch(range(8))
    target = hidden_mask(observed, frac=0.2, generator=torch.Generator().manual_seed(0))
    context = observed & ~target

    def loss_fn(params, f, s, c, t):
        return masked_bce(functional_call(model, params, (f[None], s[None], c[None])), s[None], t[None])[0]

    def loss_of(m, f, s, c, t):
        return masked_bce(m(f[None], s[None], c[None]), s[None], t[None])[0]

    # Execute
    params = {name: p.detach() for name, p in model.named_parameters()}
    summed, norms = clipped_grad_sum(loss_fn, params, (feats, scores, context, target), clip_norm=0.5)
    expected, expected_norms = _manual_clipped_sum(model, loss_of, (feats, scores, context, target), 0.5)

    # Assert: every clipped contribution has norm <= C, and the sums agree
    assert norms.tolist() == pytest.approx(expected_norms, rel=1e-4)
    for name in expected:
        assert torch.allclose(summed[name], expected[name], atol=1e-5)
    assert float(torch.sqrt(sum(v.pow(2).sum() for v in summed.values()))) <= 0.5 * 8 + 1e-5


def test_update_is_new_minus_old_and_training_is_seeded(sim: Prepared) -> None:
    def run(seed: int):
        model = CDModel(sim.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))
        before = get_parameters(model)
        generator = torch.Generator().manual_seed(seed)
        result = train_local(model, sim.train, config=LocalConfig(epochs=1), generator=generator)
        return before, get_parameters(model), result

    before, after, result = run(1)
    _, _, again = run(1)
    _, _, other = run(2)
    assert all(np.allclose(u, a - b) for u, a, b in zip(result.update, after, before, strict=True))
    assert all(np.array_equal(u, v) for u, v in zip(result.update, again.update, strict=True))
    assert not all(np.array_equal(u, v) for u, v in zip(result.update, other.update, strict=True))
    assert result.n_students == len(sim.train) and result.pre_clip_norms == []


def test_dp_sgd_reports_per_student_norms_and_noise_matters(sim: Prepared) -> None:
    # Prepare
    def run(noise: float) -> tuple:
        model = CDModel(sim.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))
        dp = StudentDP(noise_multiplier=noise, clip_norm=0.1, sample_rate=0.1, steps=5)
        return train_local(model, sim.train, config=LocalConfig(optimizer="sgd", lr=0.1),
                           generator=torch.Generator().manual_seed(3), dp=dp)

    # Execute
    quiet, noisy = run(0.0), run(5.0)

    # Assert: ~q n students per step, all norms logged; clipped mean gradient <= C, so SGD moves <= lr * C
    assert 5 * 0.1 * len(sim.train) * 0.6 < len(quiet.pre_clip_norms) < 5 * 0.1 * len(sim.train) * 1.4
    assert max(quiet.pre_clip_norms) > 0.1  # clipping was active
    assert l2_norm(quiet.update) <= 5 * 0.1 * 0.1 * 1.5 + 1e-6
    assert l2_norm(noisy.update) > 3 * l2_norm(quiet.update)
    assert quiet.steps == 5


def test_fedprox_term_keeps_the_model_closer_to_its_start(sim: Prepared) -> None:
    def drift(mu: float) -> float:
        model = CDModel(sim.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))
        config = LocalConfig(epochs=2, prox_mu=mu)
        return l2_norm(train_local(model, sim.train, config=config, generator=torch.Generator().manual_seed(1)).update)

    assert drift(10.0) < 0.7 * drift(0.0)
