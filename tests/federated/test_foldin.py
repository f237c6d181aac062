"""local-fed's fold-in (issue 33): a stable Hessian, and intervals from the model that predicts, which cover."""

from __future__ import annotations

import torch

from evaluation.coverage_sim import coverage, generator_model, simulate_model
from federated.foldin import Evidence, Prior, _hessian_pieces, predictive_variance
from federated.hocdm import HigherOrderCDM
from qmatrix import example_qmatrix
from qmatrix.datasets import load_frcsub

Q = example_qmatrix()


def test_the_hessian_denominator_stays_positive_and_exact_in_float32() -> None:
    # Prepare: large loadings and little information, where 1 − uᵀA⁻¹u cancels (the difference form was 10 % off)
    k = 40
    prior = Prior(torch.zeros(k), torch.full((k,), 30.0), torch.full((k,), 0.05))
    info = torch.zeros((1, k))
    info[0, 0] = 1e-3
    wide = Prior(*(t.double() for t in prior))
    # Execute
    _, _, denom = _hessian_pieces(prior, info)
    a, u, _ = _hessian_pieces(wide, info.double())
    exact = 1 - (u.pow(2) / a).sum(-1, keepdim=True)  # in float64 the difference form still holds enough digits
    # Assert
    assert float(denom) > 0
    assert abs(float(denom) - float(exact)) / float(exact) < 1e-4


def test_the_predictive_variance_is_the_inverse_of_the_full_hessian() -> None:
    # Prepare: two items requiring two concepts each, so the full curvature has off-diagonal terms
    model = HigherOrderCDM(Q.concepts, items=Q.item_ids)
    feats = torch.from_numpy(model.item_table(Q)).unsqueeze(0)
    scores = (torch.arange(len(Q.items)) % 2).float().unsqueeze(0)
    context = torch.ones_like(scores, dtype=torch.bool)
    prior, evidence = model._fold_in_inputs(feats, scores, context)
    theta = torch.linspace(-1.0, 1.0, len(Q.concepts)).unsqueeze(0).double()
    mu, lam, psi = (t.detach().double() for t in prior)
    sigma = torch.outer(lam, lam) + torch.diag(psi)
    q = feats[0, :, : len(Q.concepts)].double()
    qbar = q / q.sum(-1, keepdim=True)
    alpha, c = (t.detach().double() for t in model.item_parameters(feats[0]))

    def log_posterior(t: torch.Tensor) -> torch.Tensor:
        z = alpha * (qbar @ t) + c
        y = scores[0].double()
        loglik = (y * torch.nn.functional.logsigmoid(z) + (1 - y) * torch.nn.functional.logsigmoid(-z)).sum()
        d = t - mu
        return loglik - 0.5 * d @ torch.linalg.solve(sigma, d)

    # Execute
    hessian = torch.autograd.functional.hessian(log_posterior, theta[0])
    expected = torch.linalg.inv(-hessian).diagonal()
    got = predictive_variance(prior, evidence, theta)[0]
    # Assert
    assert torch.allclose(got, expected, rtol=1e-6)


def test_local_fed_intervals_cover_students_simulated_from_its_own_model() -> None:
    # Prepare: FrcSub's Q-matrix (items requiring up to four concepts), 300 seeded students, 100 answers each
    q = load_frcsub().qmatrix
    model = generator_model(q, seed=0)
    students = simulate_model(q, model, n_students=300, n_responses=100, seed=1)
    # Execute
    with torch.no_grad():
        _, low, high = model.mastery_interval(students.feats, students.scores, torch.ones_like(students.scores).bool())
    overall, _ = coverage(students.truth, low.double().numpy(), high.double().numpy(), students.answered)
    # Assert: the nominal 90 % interval covers 85–95 % (the split likelihood's covered 79 % here)
    assert 0.85 <= overall <= 0.95
