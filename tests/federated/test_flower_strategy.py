"""Flower strategy wrappers: Poisson sampling, clipping with logged norms, equal weights, client-level noise."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import SimpleClientManager
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.strategy import FedAvg, FedMedian, FedTrimmedAvg

from federated import FedConfig, add_gaussian_noise, clip_update, poisson_sample
from federated.flower import ClientSeeds, ClientUpdates, FlowerConfig, PoissonSampling, build_strategy

GLOBAL = [np.zeros((2, 2), np.float32), np.zeros(3, np.float32)]


def _manager(n: int) -> SimpleClientManager:
    manager = SimpleClientManager()
    for node_id in range(101, 101 + n):
        manager.register(GridClientProxy(node_id=node_id, grid=None, run_id=1))  # type: ignore[arg-type]
    return manager


def _result(node_id: int, update: list[np.ndarray], *, n: int = 1, partition: int | None = None) -> tuple:
    metrics = {"partition_id": node_id - 101 if partition is None else partition, "loss": 0.5}
    proxy = GridClientProxy(node_id=node_id, grid=None, run_id=1)  # type: ignore[arg-type]
    return proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(update), n, metrics)


def _update(value: float) -> list[np.ndarray]:
    return [np.full((2, 2), value, np.float32), np.full(3, value, np.float32)]


def _fedavg() -> FedAvg:
    return FedAvg(fraction_evaluate=0.0, min_fit_clients=1, min_available_clients=1)


def test_poisson_sampling_statistics_match_independent_bernoulli_draws() -> None:
    # Prepare
    n, q, rounds = 20, 0.3, 2000
    strategy = PoissonSampling(_fedavg(), sample_rate=q, rng=np.random.default_rng(7))
    manager, params = _manager(n), ndarrays_to_parameters(GLOBAL)

    # Execute
    counts, inclusion = [], np.zeros(n)
    for r in range(rounds):
        chosen = [proxy.node_id for proxy, _ in strategy.configure_fit(r, params, manager)]
        counts.append(len(chosen))
        inclusion[np.asarray(chosen, dtype=int) - 101] += 1

    # Assert: Binomial(n, q) sizes, every client included with frequency q, independently
    counts_arr = np.asarray(counts)
    assert abs(counts_arr.mean() - n * q) < 4 * np.sqrt(n * q * (1 - q) / rounds)
    assert counts_arr.var() == pytest.approx(n * q * (1 - q), rel=0.15)
    assert np.all(np.abs(inclusion / rounds - q) < 4 * np.sqrt(q * (1 - q) / rounds))
    assert len(set(counts)) > 5  # not a fixed-size sample


def test_poisson_sampling_is_the_same_draw_as_federated_dp_and_reproducible() -> None:
    # Prepare
    manager, params = _manager(10), ndarrays_to_parameters(GLOBAL)
    reference = np.random.default_rng(3)

    # Execute
    strategy = PoissonSampling(_fedavg(), sample_rate=0.4, rng=np.random.default_rng(3))
    draws = [sorted(p.node_id - 101 for p, _ in strategy.configure_fit(r, params, manager)) for r in range(50)]

    # Assert
    assert draws == [poisson_sample(10, 0.4, reference).tolist() for _ in range(50)]


def test_empty_poisson_sample_configures_no_client() -> None:
    strategy = PoissonSampling(_fedavg(), sample_rate=1e-9, rng=np.random.default_rng(0))
    assert strategy.configure_fit(1, ndarrays_to_parameters(GLOBAL), _manager(5)) == []
    assert strategy.last_sampled == ()


@pytest.mark.parametrize("kwargs", [dict(sample_rate=0.0), dict(sample_rate=1.5)])
def test_poisson_sampling_refuses_bad_rates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PoissonSampling(_fedavg(), rng=np.random.default_rng(0), **kwargs)


def test_wrappers_refuse_the_global_random_module() -> None:
    with pytest.raises(TypeError):
        PoissonSampling(_fedavg(), sample_rate=0.5, rng=np.random)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ClientSeeds(_fedavg(), rng=None)  # type: ignore[arg-type]


def test_client_seeds_gives_each_sampled_client_its_own_seed() -> None:
    # Execute
    strategy = ClientSeeds(_fedavg(), rng=np.random.default_rng(0))
    instructions = strategy.configure_fit(1, ndarrays_to_parameters(GLOBAL), _manager(4))

    # Assert
    seeds = [ins.config["seed"] for _, ins in instructions]
    assert len(set(seeds)) == 4


def _aggregate(strategy: ClientUpdates, results: list, round_: int = 1) -> list[np.ndarray]:
    strategy.configure_fit(round_, ndarrays_to_parameters(GLOBAL), _manager(len(results) or 1))
    parameters, _ = strategy.aggregate_fit(round_, results, [])
    return parameters_to_ndarrays(parameters)


def test_updates_are_clipped_over_the_whole_update_and_pre_clip_norms_logged() -> None:
    # Prepare: two clients, one far over the clip norm
    strategy = ClientUpdates(_fedavg(), clip_norm=1.0)
    small, large = _update(0.1), _update(10.0)

    # Execute
    new = _aggregate(strategy, [_result(101, small), _result(102, large)])

    # Assert
    clipped, _ = clip_update(large, clip_norm=1.0)
    expected = [(s + c) / 2 for s, c in zip(small, clipped, strict=True)]
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(new, expected, strict=True))
    log = strategy.logs[1]
    assert log.pre_clip_norms == pytest.approx({0: np.sqrt(7) * 0.1, 1: np.sqrt(7) * 10.0})
    assert sorted(log.clients) == [0, 1]


def test_equal_weights_ignore_client_claimed_example_counts() -> None:
    # Prepare: client 102 claims a million students
    results = [_result(101, _update(1.0), n=10), _result(102, _update(3.0), n=1_000_000)]

    # Execute
    equal = _aggregate(ClientUpdates(_fedavg(), equal_weights=True), results)
    weighted = _aggregate(ClientUpdates(_fedavg(), equal_weights=False), results)

    # Assert
    assert np.allclose(equal[0], 2.0)
    assert weighted[0][0, 0] > 2.99


def test_client_level_noise_is_added_to_the_clipped_sum_and_divided_by_q_n() -> None:
    # Prepare
    results = [_result(101, _update(0.5)), _result(102, _update(-2.0))]
    strategy = ClientUpdates(_fedavg(), clip_norm=1.0, noise_multiplier=0.7, expected_clients=4.0,
                             rng=np.random.default_rng(11))

    # Execute
    new = _aggregate(strategy, results)

    # Assert: exactly federated.dp's mechanism with the same generator
    total = [a + b for a, b in zip(clip_update(_update(0.5), clip_norm=1.0)[0],
                                   clip_update(_update(-2.0), clip_norm=1.0)[0], strict=True)]
    noisy = add_gaussian_noise(total, noise_multiplier=0.7, clip_norm=1.0, rng=np.random.default_rng(11))
    assert all(np.allclose(a, n / 4.0, atol=1e-5) for a, n in zip(new, noisy, strict=True))


def test_client_level_noise_is_released_when_nobody_was_sampled() -> None:
    strategy = ClientUpdates(_fedavg(), clip_norm=1.0, noise_multiplier=1.0, expected_clients=2.0,
                             rng=np.random.default_rng(0))
    new = _aggregate(strategy, [])
    assert any(np.abs(a).max() > 0 for a in new)


def test_without_noise_an_empty_round_changes_nothing() -> None:
    strategy = ClientUpdates(_fedavg(), clip_norm=1.0)
    strategy.configure_fit(1, ndarrays_to_parameters(GLOBAL), _manager(1))
    assert strategy.aggregate_fit(1, [], []) == (None, {})


@pytest.mark.parametrize("kwargs", [
    dict(noise_multiplier=1.0, expected_clients=2.0, rng=np.random.default_rng(0)),  # no clip norm
    dict(clip_norm=1.0, noise_multiplier=1.0, rng=np.random.default_rng(0)),  # no expected count
    dict(clip_norm=1.0, noise_multiplier=1.0, expected_clients=2.0, rng=np.random.default_rng(0),
         equal_weights=False),
    dict(clip_norm=-1.0),
])
def test_client_updates_refuses_inconsistent_numbers(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ClientUpdates(_fedavg(), **kwargs)


@pytest.mark.parametrize(("inner", "expected"), [
    (FedMedian(), 2.0),
    (FedTrimmedAvg(beta=0.2), (1.5 + 2.0 + 3.0) / 3),  # drops the lowest and the highest of five
])
def test_robust_flower_rules_aggregate_updates_coordinate_wise(inner, expected: float) -> None:
    results = [_result(101 + i, _update(v)) for i, v in enumerate([1.0, 2.0, 3.0, 1.5, 500.0])]
    new = _aggregate(ClientUpdates(inner), results)
    assert np.allclose(new[0], expected)


def test_build_strategy_wires_the_configured_flower_rule() -> None:
    config = FlowerConfig(fed=FedConfig(dp="client", client_sample_rate=0.5, noise_multiplier=1.0, clip_norm=0.1),
                          secagg=True)
    strategy, updates, sampling = build_strategy(config, n_clients=8, rng=np.random.default_rng(0))
    assert isinstance(strategy, ClientSeeds) and strategy.inner is updates and updates.inner is sampling
    assert type(sampling.inner) is FedAvg and sampling.sample_rate == 0.5
    assert updates.expected_clients == 4.0 and updates.clipped_by_clients and updates.equal_weights
