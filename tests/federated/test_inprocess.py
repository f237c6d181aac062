"""The in-process FedAvg driver: parity with centralized training, DP modes, and the budget stop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from federated import (
    CDModel,
    FedConfig,
    LocalConfig,
    StudentDP,
    dirichlet_partition,
    epsilon_for,
    evaluate_masked,
    get_parameters,
    hidden_mask,
    iid_partition,
    run_fedavg,
    train_local,
)
from tests.federated.conftest import Prepared


def _clients(prepared: Prepared, n: int = 3, seed: int = 1):
    parts = iid_partition(len(prepared.train), n_clients=n, rng=np.random.default_rng(seed))
    return [prepared.train.subset(p) for p in parts]


def _model(prepared: Prepared) -> CDModel:
    return CDModel(prepared.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))


def _held_out_auc(model: CDModel, prepared: Prepared) -> float:
    hidden = hidden_mask(prepared.test.observed, frac=0.2, generator=torch.Generator().manual_seed(0))
    return evaluate_masked(model, prepared.test, hidden).auc


def _fed_vs_central(prepared: Prepared) -> tuple[float, float]:
    central = _model(prepared)
    train_local(central, prepared.train, config=LocalConfig(epochs=20), generator=torch.Generator().manual_seed(1))
    config = FedConfig(rounds=10, local=LocalConfig(epochs=2))
    result = run_fedavg(
        _model(prepared), _clients(prepared), prepared.test, config=config, rng=np.random.default_rng(2)
    )
    assert result.history[-1].auc == pytest.approx(_held_out_auc(result.model, prepared))
    return _held_out_auc(central, prepared), result.history[-1].auc


def test_fedavg_three_clients_matches_centralized_on_simulated_dina(sim: Prepared) -> None:
    central, federated = _fed_vs_central(sim)
    assert federated > 0.78
    assert abs(federated - central) < 0.03


def test_fedavg_three_clients_matches_centralized_on_frcsub(frcsub: Prepared) -> None:
    central, federated = _fed_vs_central(frcsub)
    assert federated > 0.85
    assert abs(federated - central) < 0.03


def test_history_records_clients_bytes_and_marks_answered_items_seen(sim: Prepared) -> None:
    # Execute
    result = run_fedavg(_model(sim), _clients(sim), sim.test, config=FedConfig(rounds=2), rng=np.random.default_rng(0))

    # Assert
    n_params = sum(a.size for a in get_parameters(result.model))
    for record in result.history:
        assert record.sampled_clients == (0, 1, 2)
        assert record.bytes_sent == 3 * 4 * n_params
        assert record.epsilon is None and record.seconds > 0 and record.train_loss > 0
    assert result.model.seen_item_ids == set(sim.dataset.qmatrix.item_ids)
    assert result.stop_reason is None and result.accountant is None


def test_client_level_dp_clips_logs_norms_and_charges_every_round(sim: Prepared) -> None:
    # Prepare
    config = FedConfig(rounds=4, client_sample_rate=0.5, dp="client", noise_multiplier=1.0, clip_norm=0.05)

    # Execute
    result = run_fedavg(_model(sim), _clients(sim, n=6), sim.test, config=config, rng=np.random.default_rng(0))

    # Assert
    epsilons = [r.epsilon for r in result.history]
    assert epsilons == sorted(epsilons) and epsilons[0] > 0
    assert epsilons[-1] == pytest.approx(epsilon_for([(1.0, 0.5, 4)], delta=1e-5))
    for record in result.history:
        assert set(record.pre_clip_norms) == set(record.sampled_clients)
        assert all(norm > 0.05 for norm in record.pre_clip_norms.values())  # clipping was active
    assert result.accountant is not None and len(result.accountant) == 4


def test_client_level_dp_releases_noise_even_when_no_client_is_sampled(sim: Prepared) -> None:
    # Prepare: q so small that some round samples nobody
    config = FedConfig(rounds=3, client_sample_rate=0.01, dp="client", noise_multiplier=1.0, clip_norm=0.1)
    model = _model(sim)
    before = get_parameters(model)

    # Execute
    result = run_fedavg(model, _clients(sim), sim.test, config=config, rng=np.random.default_rng(0))

    # Assert
    assert all(r.sampled_clients == () and r.bytes_sent == 0 for r in result.history)
    assert not all(np.array_equal(a, b) for a, b in zip(before, get_parameters(model), strict=True))
    assert len(result.accountant) == 3


def test_hard_stop_fires_before_the_round_that_would_exceed_the_budget(sim: Prepared) -> None:
    # Prepare: a budget between epsilon after 3 and after 4 rounds
    after3, after4 = (epsilon_for([(0.8, 0.5, k)], delta=1e-5) for k in (3, 4))
    budget = (after3 + after4) / 2
    config = FedConfig(rounds=10, client_sample_rate=0.5, dp="client", noise_multiplier=0.8, clip_norm=0.1,
                       epsilon_budget=budget, local=LocalConfig(epochs=1))

    # Execute
    result = run_fedavg(_model(sim), _clients(sim), sim.test, config=config, rng=np.random.default_rng(0))

    # Assert
    assert len(result.history) == 3
    assert result.stop_reason is not None and "round 4" in result.stop_reason
    assert result.history[-1].epsilon <= budget
    assert result.accountant.get_epsilon(1e-5) == pytest.approx(after3)


def test_student_level_dp_runs_and_charges_local_steps(sim: Prepared) -> None:
    # Prepare
    student_dp = StudentDP(noise_multiplier=1.0, clip_norm=1.0, sample_rate=0.2, steps=5)
    config = FedConfig(rounds=2, dp="student", student_dp=student_dp, local=LocalConfig(lr=0.02))

    # Execute
    result = run_fedavg(_model(sim), _clients(sim), sim.test, config=config, rng=np.random.default_rng(0))

    # Assert
    assert result.history[-1].epsilon == pytest.approx(epsilon_for([(1.0, 0.2, 10)], delta=1e-5))
    assert all(r.student_norm_median is not None and r.student_norm_median > 0 for r in result.history)
    assert 0.5 < result.history[-1].auc <= 1.0


def test_non_iid_clients_with_fedprox_still_learn(sim: Prepared) -> None:
    # Prepare: ability-skewed clients
    parts = dirichlet_partition(sim.train.proportion_correct(), n_clients=4, alpha=0.3, rng=np.random.default_rng(0),
                                min_size=10)
    clients = [sim.train.subset(p) for p in parts]
    config = FedConfig(rounds=5, local=LocalConfig(epochs=2, prox_mu=0.1))

    # Execute
    result = run_fedavg(_model(sim), clients, sim.test, config=config, rng=np.random.default_rng(0))

    # Assert
    assert result.history[-1].auc > 0.75


@pytest.mark.parametrize("kwargs", [
    dict(dp="client", noise_multiplier=0.0),
    dict(dp="student"),
    dict(epsilon_budget=1.0),
    dict(client_sample_rate=0.0),
    dict(dp="secure"),
])
def test_invalid_configurations_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        FedConfig(**kwargs)
